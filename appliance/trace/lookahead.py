"""How well earlier routing predicts the experts an LRU expert cache will miss one layer ahead.

An engine can start reading a layer's missing experts while the layer before it computes only
if it knows them in advance. `llama-moe-trace --expert-lookahead` measures the bound: the
experts taken from the future trace (an oracle). A real engine must predict them from what it
has seen when the previous layer is routed: every earlier token's routes, and the current
token's routes up to the previous layer. This scores such predictors on a recorded trace.

The cache is `lru` over one global pool of (layer, expert) objects with the replay's event
semantics (`appliance/trace/kernels.py`): an event is one (step, MoE layer), its distinct
experts are pinned while it loads, a miss evicts the least recently used other resident.
Each decode event at MoE layer index j >= 1 is predicted once, when event j - 1 of the same
step has been served: `predicted` experts of layer j, ranked by the predictor, of which those
not resident then would be read ahead. A prediction is scored against the event's misses
(`recall`: the share of decode misses read ahead) and its cost (`wasted`: experts read ahead
that the event did not request). Layer 0 of each step has no earlier layer of its own token;
it is not predicted (its misses count as not predicted).

Predictors (each from the trace's rows before the event, one row per token and layer):
- `oracle`: the event's own misses (the bound `--expert-lookahead` measures);
- `previous-token`: the experts the previous step chose at layer j;
- `popularity`: layer j's experts most often chosen so far;
- `co-occurrence`: layer j's experts most often chosen by the same token as the current
  token's experts at layer j - 1, summed over those experts (ties: popularity).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from appliance.core.errors import ConfigError
from appliance.trace.format import KIND_DECODE, Trace

PREDICTORS = ("oracle", "previous-token", "popularity", "co-occurrence")


@dataclass(frozen=True)
class PredictionScore:
    """One predictor's record over a trace's decode events."""

    predictor: str
    capacity: int
    predicted: int  # experts of the next layer predicted per event
    decode_tokens: int
    decode_misses: int
    misses_read_ahead: int  # decode misses the prediction one event earlier held
    wasted: int  # experts read ahead that their event did not request

    @property
    def recall(self) -> float | None:
        return self.misses_read_ahead / self.decode_misses if self.decode_misses else None

    @property
    def wasted_per_token(self) -> float | None:
        return self.wasted / self.decode_tokens if self.decode_tokens else None

    def to_json(self) -> dict[str, object]:
        return {
            "predictor": self.predictor,
            "capacity": self.capacity,
            "predicted": self.predicted,
            "decode_tokens": self.decode_tokens,
            "decode_misses": self.decode_misses,
            "misses_read_ahead": self.misses_read_ahead,
            "recall": self.recall,
            "wasted": self.wasted,
            "wasted_per_token": self.wasted_per_token,
        }


class _Lru:
    """The replay's lru over one global pool, event by event."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.order: OrderedDict[int, None] = OrderedDict()  # oldest first

    def holds(self, x: int) -> bool:
        return x in self.order

    def event(self, items: list[int]) -> list[int]:
        """Serve one event (distinct items, ascending); return its misses."""
        if len(items) > self.capacity:
            raise ConfigError(
                f"an event needs {len(items)} experts, more than the capacity {self.capacity}; "
                "use a larger --capacity"
            )
        pinned = set(items)
        misses = []
        for x in items:  # ascending, as the kernel touches them
            if x in self.order:
                self.order.move_to_end(x)
                continue
            misses.append(x)
            if len(self.order) >= self.capacity:
                victim = next(v for v in self.order if v not in pinned)
                del self.order[victim]
            self.order[x] = None
        return misses


def _events(trace: Trace) -> list[tuple[int, int, bool, np.ndarray]]:
    """(step, layer index, decode?, rows' expert ids) per (step, MoE layer), in trace order."""
    rows = trace.rows
    index = {layer: j for j, layer in enumerate(trace.moe_layers)}
    out: list[tuple[int, int, bool, np.ndarray]] = []
    start = 0
    for end in range(1, len(rows) + 1):
        if (
            end < len(rows)
            and rows["step"][end] == rows["step"][start]
            and rows["layer"][end] == rows["layer"][start]
        ):
            continue
        chunk = rows[start:end]
        out.append(
            (
                int(chunk["step"][0]),
                index[int(chunk["layer"][0])],
                bool(chunk["kind"][0] == KIND_DECODE),
                chunk["ids"],
            )
        )
        start = end
    return out


def score_predictors(trace: Trace, capacity: int, predicted: int) -> list[PredictionScore]:
    """Every predictor of PREDICTORS on the trace's decode events at an lru capacity."""
    if predicted < 1 or predicted > trace.n_experts:
        raise ConfigError(f"--predict must be 1 to {trace.n_experts} experts (got {predicted})")
    n, n_layers = trace.n_experts, len(trace.moe_layers)
    popularity = np.zeros((n_layers, n), dtype=np.int64)
    together = np.zeros((max(n_layers - 1, 1), n, n), dtype=np.int64)  # [j - 1, expert at j - 1, expert at j]
    previous: dict[int, np.ndarray] = {}  # layer index -> the last step's distinct experts
    tokens: dict[int, np.ndarray] = {}  # this step: layer index -> rows' ids (token x k)
    lru = _Lru(capacity)
    misses = dict.fromkeys(PREDICTORS, 0)
    wasted = dict.fromkeys(PREDICTORS, 0)
    total_misses = decode_tokens = 0
    current_step = -1
    for step, j, decode, ids in _events(trace):
        if step != current_step:
            for layer, chosen in tokens.items():
                previous[layer] = np.unique(chosen)
            tokens = {}
            current_step = step
            decode_tokens += int(decode)
        items = sorted({int(e) for e in np.unique(ids)})
        objects = [j * n + e for e in items]
        guesses = (
            _predictions(j, ids, tokens, previous, popularity, together, predicted)
            if decode and j > 0
            else {}
        )
        ahead = {name: [e for e in guess if not lru.holds(j * n + e)] for name, guess in guesses.items()}
        missed = lru.event(objects)
        if decode:
            total_misses += len(missed)
            missed_experts = {x - j * n for x in missed}
            ahead["oracle"] = sorted(missed_experts) if j > 0 else []
            for name, read in ahead.items():
                misses[name] += sum(1 for e in read if e in missed_experts)
                wasted[name] += sum(1 for e in read if e not in missed_experts)
        _learn(j, ids, tokens, popularity, together)
    return [
        PredictionScore(name, capacity, predicted, decode_tokens, total_misses, misses[name], wasted[name])
        for name in PREDICTORS
    ]


def _predictions(
    j: int,
    ids: np.ndarray,
    tokens: dict[int, np.ndarray],
    previous: dict[int, np.ndarray],
    popularity: np.ndarray,
    together: np.ndarray,
    predicted: int,
) -> dict[str, list[int]]:
    """What each predictor would have read ahead for layer j once layer j - 1 of this step was served."""
    by_count = list(np.argsort(-popularity[j], kind="stable")[:predicted])
    scores = np.zeros(popularity.shape[1], dtype=np.float64)
    for e in np.unique(tokens.get(j - 1, np.empty(0, dtype=np.int64))):
        scores += together[j - 1, int(e)]
    # popularity breaks ties, scaled below one co-occurrence
    scores += popularity[j] / (popularity[j].max() + 1.0)
    return {
        "previous-token": [int(e) for e in previous.get(j, np.empty(0, dtype=np.int64))][:predicted],
        "popularity": [int(e) for e in by_count],
        "co-occurrence": [int(e) for e in np.argsort(-scores, kind="stable")[:predicted]],
    }


def _learn(
    j: int, ids: np.ndarray, tokens: dict[int, np.ndarray], popularity: np.ndarray, together: np.ndarray
) -> None:
    """Count this event's rows: each token's experts at layer j, and beside the same token's at j - 1."""
    tokens[j] = ids
    np.add.at(popularity[j], ids.ravel(), 1)
    before = tokens.get(j - 1)
    if j == 0 or before is None or len(before) != len(ids):
        return
    for prev_row, row in zip(before, ids, strict=True):
        together[j - 1][np.ix_(prev_row, row)] += 1
