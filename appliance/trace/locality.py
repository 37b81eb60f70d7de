"""Locality of a trace's routing, over its decode tokens (docs/trace-format.md, "Locality").

Every statistic reads the decode rows only (kind = decode): a decode token is evaluated
alone, so its experts are what a token costs once the prompt is done, and the prompt's one
big batch would blur it. With L MoE layers, E experts per layer, k experts per token and
A = the decode activations (decode rows x k), c(l, e) = how many decode activations chose
expert e at layer l:

- **pairs touched**: the share of the L x E (layer, expert) pairs with c(l, e) > 0.
- **hottest over uniform**: max c(l, e) over the mean count if every pair were chosen
  equally often, A / (L x E). With every layer on every decode token that is
  max c(l, e) / (T x k / E) for T decode tokens.
- **next-token reuse** (per layer and overall): a decode token at position p and layer l
  whose previous token (position p - 1) also has a decode row at l keeps
  |S(p, l) ∩ S(p - 1, l)| of its k experts; the share is the sum of those over k x the
  number of such (token, layer) pairs. The first decode token, whose predecessor is a prompt
  token, does not count.
- **reuse distance**: for each decode activation (p, l, e), p - p' where p' is the last
  earlier decode token that chose e at l, or "first" when none did; the distribution is the
  share of all decode activations in each of `DISTANCE_BUCKETS`.
- **hit rates**: our replay (`appliance.trace.replay`, MoE-atomic events, one global pool of
  (layer, expert) objects) of the decode rows from a cold cache, LRU and Belady, at
  capacities of `CAPACITY_SHARES` of the L x E pairs (floor, at least k experts).

Measured this way on the three public traces (`tests/fixtures/real-routes/`), the values of
issue 34's table come back: pairs touched 49.8/52.3/28.0%, hottest over uniform 20.8/20.2/
53.0, next-token reuse 38.0/35.7/17.9% for Qwen3-30B-A3B, gemma-4-26B-A4B and gpt-oss-120b.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from appliance.trace.events import trace_events
from appliance.trace.format import KIND_DECODE, Trace
from appliance.trace.replay import RATE_DIGITS, ReplaySetup, replay_one

CAPACITY_SHARES = (0.10, 0.25, 0.50)
POLICIES = ("lru", "belady")
# (label, smallest distance, largest distance) in tokens; None: no earlier use
DISTANCE_BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1),
    ("2", 2, 2),
    ("3-4", 3, 4),
    ("5-8", 5, 8),
    ("9-16", 9, 16),
    ("17-32", 17, 32),
    ("33-64", 33, 64),
    (">64", 65, 1 << 62),
)


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, RATE_DIGITS) if whole else None


def decode_trace(trace: Trace) -> Trace:
    """The trace's decode rows as a trace of their own (same header)."""
    return Trace(header=trace.header, rows=trace.rows[trace.rows["kind"] == KIND_DECODE])


def _activations(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(layer index, position, expert) of every decode activation, int64 each."""
    layers = np.asarray(trace.moe_layers, dtype=np.int64)
    lookup = np.zeros(int(layers.max()) + 1, dtype=np.int64)
    lookup[layers] = np.arange(len(layers))
    rows = trace.rows
    k = trace.k
    lidx = np.repeat(lookup[rows["layer"].astype(np.int64)], k)
    pos = np.repeat(rows["pos"].astype(np.int64), k)
    return lidx, pos, rows["ids"].astype(np.int64).ravel()


def next_token_reuse(trace: Trace, lidx: np.ndarray, pos: np.ndarray, ids: np.ndarray) -> dict[str, Any]:
    """Kept share of the previous token's experts, overall and per MoE layer (decode rows)."""
    n_layers, n_experts, k = len(trace.moe_layers), trace.n_experts, trace.k
    span = int(pos.max()) + 2 if len(pos) else 1
    row_key = lidx[::k] * span + pos[::k]
    has_prev = np.isin(row_key - 1, row_key)
    act_key = (lidx * span + pos) * n_experts + ids
    kept = np.isin(act_key - n_experts, act_key)  # the same expert at p - 1, same layer
    kept_per_layer = np.bincount(lidx[kept], minlength=n_layers)
    pairs_per_layer = np.bincount(lidx[::k][has_prev], minlength=n_layers) * k
    return {
        "overall": _share(int(kept_per_layer.sum()), int(pairs_per_layer.sum())),
        "per_layer": [
            {"layer": block, "reuse": _share(int(kept_per_layer[j]), int(pairs_per_layer[j]))}
            for j, block in enumerate(trace.moe_layers)
        ],
    }


def reuse_distances(lidx: np.ndarray, pos: np.ndarray, ids: np.ndarray, n_experts: int) -> np.ndarray:
    """Per decode activation, tokens since its (layer, expert) was last chosen; 0 for none."""
    pair = lidx * n_experts + ids
    order = np.lexsort((pos, pair))
    distance = np.zeros(len(pair), dtype=np.int64)
    same = pair[order[1:]] == pair[order[:-1]]
    distance[order[1:][same]] = (pos[order[1:]] - pos[order[:-1]])[same]
    return distance


def distance_distribution(distance: np.ndarray) -> list[dict[str, Any]]:
    total = len(distance)
    out = [
        {"distance": label, "share": _share(int(((distance >= low) & (distance <= high)).sum()), total)}
        for label, low, high in DISTANCE_BUCKETS
    ]
    out.append({"distance": "first", "share": _share(int((distance == 0).sum()), total)})
    return out


def capacity_hit_rates(decode: Trace, n_pairs: int) -> list[dict[str, Any]]:
    """LRU and Belady hit rates of the decode rows, global pool, at `CAPACITY_SHARES` of the pairs."""
    if not len(decode.rows):
        return []
    setup = ReplaySetup(events=trace_events(decode), k=decode.k, expert_bytes=None)
    out = []
    for share in CAPACITY_SHARES:
        capacity = max(decode.k, int(share * n_pairs))
        rates = {p: replay_one(setup, p, capacity, "global")["total"]["hit_rate"] for p in POLICIES}
        out.append({"share": share, "capacity": capacity} | rates)
    return out


def locality(trace: Trace) -> dict[str, Any]:
    """The locality statistics of the trace's decode tokens (JSON-ready, deterministic)."""
    decode = decode_trace(trace)
    n_layers, n_experts = len(trace.moe_layers), trace.n_experts
    n_pairs = n_layers * n_experts
    lidx, pos, ids = _activations(decode)
    counts = np.bincount(lidx * n_experts + ids, minlength=n_pairs)
    tokens = int((decode.rows["layer"] == trace.moe_layers[0]).sum())
    mean = len(ids) / n_pairs
    return {
        "decode_tokens": tokens,
        "activations": len(ids),
        "pairs": n_pairs,
        "pairs_touched": _share(int(np.count_nonzero(counts)), n_pairs),
        "hottest_count": int(counts.max()) if len(ids) else 0,
        "hottest_over_uniform": round(float(counts.max()) / mean, 3) if len(ids) else None,
        "next_token_reuse": next_token_reuse(trace, lidx, pos, ids),
        "reuse_distance": distance_distribution(reuse_distances(lidx, pos, ids, n_experts)),
        "hit_rates": capacity_hit_rates(decode, n_pairs),
    }
