"""Synthetic route traces with controllable skew and temporal locality, deterministic by seed.

Each MoE layer gets its own Zipf-like expert popularity (weight of the r-th most popular expert
proportional to 1 / r**s, the ranking a seeded permutation per layer; s is `skew`, or with
`skew_spread` > 0 a per-layer exponent drawn uniformly from skew x (1 +- skew_spread): real
models have layers where one expert is in nearly every token and layers with a flat tail).

A token picks its k experts at a layer slot by slot: with probability `correlation` the
previous token's expert in that slot; otherwise, with probability `recall`, an expert last
chosen exactly d tokens back (one of that token's experts that no later token chose), d drawn
with weight 1 / d**`recall_exponent` + `recall_tail` from 1 to the token's position (and at most
`recall_window` when that is not 0): the reuse distances real routing has, short ones most
often and a long tail; otherwise (or when no such expert is left) an expert drawn from the
layer's popularity. A draw that repeats an expert the token already chose is drawn again from
the popularity, so a token's k experts are distinct. The prompt is evaluated in micro-batches
of `n_ubatch` tokens (one step each), then `n_decode` single-token decode steps follow.
`CALIBRATED` holds the knobs fitted to real traces, per shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from appliance.core.errors import ConfigError
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, Trace, row_dtype


@dataclass(frozen=True)
class TraceSynthSpec:
    """Shape and statistics of a synthetic trace."""

    n_layers: int = 4
    n_experts: int = 32
    k: int = 4
    n_prompt: int = 32
    n_ubatch: int = 16
    n_decode: int = 64
    skew: float = 1.0
    correlation: float = 0.3
    seed: int = 0
    recall: float = 0.0
    recall_exponent: float = 1.0
    recall_window: int = 0  # the furthest token back a recall reaches (0: the whole sequence)
    recall_tail: float = 0.0  # a flat weight added to every distance's 1 / d**recall_exponent
    skew_spread: float = 0.0  # per-layer skew drawn from skew x (1 +- this)

    def validate(self) -> None:
        if self.n_layers < 1 or self.n_experts < 1 or not 1 <= self.k <= self.n_experts:
            raise ConfigError(
                f"synthetic trace needs layers >= 1 and 1 <= k <= experts, got "
                f"layers={self.n_layers}, experts={self.n_experts}, k={self.k}"
            )
        if self.n_prompt < 0 or self.n_decode < 0 or self.n_prompt + self.n_decode == 0:
            raise ConfigError("synthetic trace needs at least one prompt or decode token")
        if not 0 <= self.seed < 1 << 64:
            raise ConfigError(f"seed must be from 0 to 2**64 - 1, got {self.seed}")
        if self.n_ubatch < 1:
            raise ConfigError(f"n_ubatch must be >= 1, got {self.n_ubatch}")
        if not math.isfinite(self.skew) or self.skew < 0 or not 0.0 <= self.correlation <= 1.0:
            raise ConfigError(
                f"skew must be >= 0 and correlation in [0, 1], got skew={self.skew}, "
                f"correlation={self.correlation}"
            )
        if (
            not 0.0 <= self.recall <= 1.0
            or not math.isfinite(self.recall_exponent)
            or self.recall_exponent < 0
        ):
            raise ConfigError(
                f"recall must be in [0, 1] and recall_exponent >= 0, got recall={self.recall}, "
                f"recall_exponent={self.recall_exponent}"
            )
        if not 0.0 <= self.skew_spread <= 1.0:
            raise ConfigError(f"skew_spread must be in [0, 1], got {self.skew_spread}")
        if not math.isfinite(self.recall_tail) or self.recall_tail < 0:
            raise ConfigError(f"recall_tail must be >= 0, got {self.recall_tail}")
        if self.recall_window < 0:
            raise ConfigError(f"recall_window must be >= 0 (0: the whole sequence), got {self.recall_window}")


# Per shape (layers, experts, k), routing knobs fitted to the real traces' range of every
# locality statistic (appliance.trace.calibration) with a 45-token prompt and 64 decode steps:
# `trace synth --calibrated`, fitted by `python -m bench.calibrate_synth --shape LxExK --decode
# 64` (docs/trace-format.md, "Calibrated synthetic traces", has what they meet and what not:
# some real ranges are narrower than a statistic moves between seeds, so not every seed's trace
# is inside on every statistic). Real routing differs by shape (gpt-oss's k = 2 keeps far fewer
# experts than Qwen's k = 6), so a shape without its fit is refused rather than guessed.
CALIBRATED: dict[tuple[int, int, int], dict[str, float | int]] = {
    (40, 256, 8): {
        "skew": 1.179,
        "correlation": 0.016,
        "recall": 0.781,
        "recall_exponent": 0.986,
        "recall_window": 74,
        "recall_tail": 0.009,
        "skew_spread": 0.282,
    },
}


def calibrated_knobs(n_layers: int, n_experts: int, k: int) -> dict[str, float | int]:
    """The `CALIBRATED` knobs of a shape; refuses a shape without them."""
    knobs = CALIBRATED.get((n_layers, n_experts, k))
    if knobs is None:
        known = ", ".join(f"{layers} x {experts} x {used}" for layers, experts, used in CALIBRATED)
        raise ConfigError(
            f"no calibrated routing for {n_layers} layers x {n_experts} experts x k = {k} (calibrated: "
            f"{known}); fit one with python -m bench.calibrate_synth --shape {n_layers}x{n_experts}x{k}"
        )
    return knobs


def calibrated_spec(n_layers: int, n_experts: int, k: int, **lengths: int) -> TraceSynthSpec:
    """A spec of the shape with its `CALIBRATED` knobs (lengths and seed as given)."""
    knobs: dict[str, Any] = calibrated_knobs(n_layers, n_experts, k)
    return TraceSynthSpec(n_layers=n_layers, n_experts=n_experts, k=k, **lengths, **knobs)


@njit(cache=True)
def _route(
    cdf: np.ndarray,
    ranks: np.ndarray,
    k: int,
    n_tokens: int,
    correlation: float,
    recall: float,
    distance_cdf: np.ndarray,
    uniforms: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled
    """Expert ids (layers, tokens, k) from per-layer cumulative popularity and random draws;
    `distance_cdf[d - 1]` is the cumulative weight of recall distances 1..d."""
    n_layers, n_experts = cdf.shape
    out = np.empty((n_layers, n_tokens, k), dtype=np.int32)
    used = np.zeros(n_experts, dtype=np.int64)
    stamp = 0
    u = 0
    n_u = uniforms.shape[0]
    last_use = np.empty(n_experts, dtype=np.int64)
    for layer in range(n_layers):
        last_use[:] = -1
        for tok in range(n_tokens):
            stamp += 1
            for slot in range(k):
                expert = -1
                if tok > 0 and uniforms[u] < correlation:
                    candidate = out[layer, tok - 1, slot]
                    if used[candidate] != stamp:
                        expert = candidate
                u = (u + 1) % n_u
                if expert < 0 and tok > 0 and recall > 0.0:
                    if uniforms[u] < recall:
                        u = (u + 1) % n_u
                        reach = min(tok, distance_cdf.shape[0]) - 1
                        d = np.searchsorted(distance_cdf, uniforms[u] * distance_cdf[reach], side="right")
                        u = (u + 1) % n_u
                        back = tok - 1 - min(d, tok - 1)
                        first = min(int(uniforms[u] * k), k - 1)
                        for j in range(k):  # an expert of that token not chosen since
                            candidate = out[layer, back, (first + j) % k]
                            if last_use[candidate] == back and used[candidate] != stamp:
                                expert = candidate
                                break
                    u = (u + 1) % n_u
                while expert < 0:
                    r = np.searchsorted(cdf[layer], uniforms[u] * cdf[layer, n_experts - 1], side="right")
                    u = (u + 1) % n_u
                    candidate = ranks[layer, min(r, n_experts - 1)]
                    if used[candidate] != stamp:
                        expert = candidate
                used[expert] = stamp
                out[layer, tok, slot] = expert
            for slot in range(k):
                last_use[out[layer, tok, slot]] = tok
    return out


def synth_trace(spec: TraceSynthSpec) -> Trace:
    """Build a synthetic trace in memory (rows in the spec's evaluation order)."""
    spec.validate()
    rng = np.random.Generator(np.random.PCG64(spec.seed))
    ranks = np.stack([rng.permutation(spec.n_experts) for _ in range(spec.n_layers)])
    ranks = ranks.astype(np.int64)
    n_tokens = spec.n_prompt + spec.n_decode
    draws_per_slot = 4 if spec.recall == 0 else 8
    uniforms = rng.random(spec.n_layers * n_tokens * spec.k * draws_per_slot + 1024)
    skews = np.full(spec.n_layers, spec.skew)
    if spec.skew_spread:  # drawn after the routing's draws: traces without a spread keep their bytes
        skews *= 1.0 + spec.skew_spread * (2.0 * rng.random(spec.n_layers) - 1.0)
    rank = np.arange(1, spec.n_experts + 1, dtype=np.float64)
    cdf = np.cumsum(1.0 / rank[None, :] ** skews[:, None], axis=1)
    reach = n_tokens if spec.recall_window == 0 else min(n_tokens, spec.recall_window)
    distance = np.arange(1, max(reach, 1) + 1, dtype=np.float64)
    distance_cdf = np.cumsum(1.0 / distance**spec.recall_exponent + spec.recall_tail)
    ids = _route(cdf, ranks, spec.k, n_tokens, spec.correlation, spec.recall, distance_cdf, uniforms)

    # Steps: prompt micro-batches, then one step per decode token.
    token_step = np.empty(n_tokens, dtype=np.uint32)
    token_step[: spec.n_prompt] = np.arange(spec.n_prompt) // spec.n_ubatch
    n_prompt_steps = -(-spec.n_prompt // spec.n_ubatch)
    token_step[spec.n_prompt :] = n_prompt_steps + np.arange(spec.n_decode)
    step_start = np.searchsorted(token_step, np.arange(int(token_step[-1]) + 1))
    step_end = np.append(step_start[1:], n_tokens)

    rows = np.zeros(n_tokens * spec.n_layers, dtype=row_dtype(spec.k, False))
    # Row order: step, layer, position. Build per step blocks of (layer, token).
    order_tok = []
    order_layer = []
    for start, end in zip(step_start, step_end, strict=True):
        toks = np.arange(start, end)
        order_tok.append(np.tile(toks, spec.n_layers))
        order_layer.append(np.repeat(np.arange(spec.n_layers), end - start))
    tok_idx = np.concatenate(order_tok)
    layer_idx = np.concatenate(order_layer)
    rows["step"] = token_step[tok_idx]
    rows["layer"] = layer_idx
    rows["kind"] = np.where(tok_idx < spec.n_prompt, KIND_PROMPT, KIND_DECODE)
    rows["pos"] = tok_idx
    rows["ids"] = ids[layer_idx, tok_idx]
    return Trace(header=synth_header(spec), rows=rows)


def synth_header(spec: TraceSynthSpec) -> dict[str, Any]:
    return {
        "format": "moetrace",
        "version": 1,
        "arch": "synthetic",
        "model_file": "synthetic",
        "model_bytes": 0,
        "model_sha256": None,
        "n_layers": spec.n_layers,
        "moe_layers": list(range(spec.n_layers)),
        "n_experts": spec.n_experts,
        "n_expert_used": spec.k,
        "has_weights": False,
        "engine": {"tool": "appliance trace synth", "llama_build": None, "backend": None},
        "n_prompt_tokens": spec.n_prompt,
        "n_predict": spec.n_decode,
        "n_ubatch": spec.n_ubatch,
        "synthetic": synth_knobs(spec),
    }


def synth_knobs(spec: TraceSynthSpec) -> dict[str, Any]:
    """The header's `synthetic`: the routing knobs, the newer ones only when in use (so a trace
    made without them keeps its bytes)."""
    knobs: dict[str, Any] = {"skew": spec.skew, "correlation": spec.correlation, "seed": spec.seed}
    if spec.recall:
        knobs |= {
            "recall": spec.recall,
            "recall_exponent": spec.recall_exponent,
            "recall_window": spec.recall_window,
            "recall_tail": spec.recall_tail,
        }
    if spec.skew_spread:
        knobs["skew_spread"] = spec.skew_spread
    return knobs
