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
- **reuse distance**: for each decode activation (t, l, e), t the decode token's ordinal in
  evaluation order, t - t' where t' is the last earlier decode token that chose e at l, or
  "first" when none did; the distribution is the share of all decode activations in each of
  `DISTANCE_BUCKETS`.
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
# (label, smallest distance in tokens): each bucket runs to the next one's smallest - 1
DISTANCE_BUCKETS: tuple[tuple[str, int], ...] = (
    ("1", 1),
    ("2", 2),
    ("3-4", 3),
    ("5-8", 5),
    ("9-16", 9),
    ("17-32", 17),
    ("33-64", 33),
    (">64", 65),
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


def previous_rows(lidx: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per row, the index of the row at the same layer and position - 1, or -1 when none."""
    span = int(pos.max()) + 2 if len(pos) else 1
    key = lidx * span + pos
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    at = np.searchsorted(ordered, key - 1)
    found = (at < len(key)) & (ordered[np.minimum(at, len(key) - 1)] == key - 1)
    return np.where(found, order[np.minimum(at, len(key) - 1)], -1)


def kept_experts(ids: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """Per row with a previous row, how many of its ids the previous row also chose (rows of
    k ids compared k x k, in chunks that keep the comparison under 64 MiB)."""
    k = ids.shape[1]
    rows = np.flatnonzero(prev >= 0)
    kept = np.zeros(len(rows), dtype=np.int64)
    chunk = max(1, (1 << 26) // (k * k))
    for start in range(0, len(rows), chunk):
        sel = rows[start : start + chunk]
        now, before = ids[sel], ids[prev[sel]]
        kept[start : start + chunk] = (now[:, :, None] == before[:, None, :]).any(axis=2).sum(axis=1)
    return kept


def next_token_reuse(trace: Trace, lidx: np.ndarray, pos: np.ndarray, ids: np.ndarray) -> dict[str, Any]:
    """Kept share of the previous token's experts, overall and per MoE layer (decode rows)."""
    n_layers, k = len(trace.moe_layers), trace.k
    row_lidx, row_pos = lidx[::k], pos[::k]
    prev = previous_rows(row_lidx, row_pos)
    kept = kept_experts(ids.reshape(-1, k), prev)
    with_prev = row_lidx[prev >= 0]
    kept_per_layer = np.bincount(with_prev, weights=kept, minlength=n_layers).astype(np.int64)
    pairs_per_layer = np.bincount(with_prev, minlength=n_layers) * k
    return {
        "overall": _share(int(kept_per_layer.sum()), int(pairs_per_layer.sum())),
        "per_layer": [
            {"layer": block, "reuse": _share(int(kept_per_layer[j]), int(pairs_per_layer[j]))}
            for j, block in enumerate(trace.moe_layers)
        ],
    }


def stable_pair_order(pair: np.ndarray) -> np.ndarray:
    """The stable argsort of non-negative ids below 2**32, as two 16-bit radix passes (numpy
    sorts 16-bit keys stably by radix, several times faster than a 64-bit sort)."""
    order = np.argsort((pair & 0xFFFF).astype(np.uint16), kind="stable")
    if len(pair) and int(pair.max()) >= 1 << 16:
        order = order[np.argsort((pair[order] >> 16).astype(np.uint16), kind="stable")]
    return order


def reuse_distances(lidx: np.ndarray, token: np.ndarray, ids: np.ndarray, n_experts: int) -> np.ndarray:
    """Per decode activation (in evaluation order, `token` its decode token's ordinal), decode
    tokens since its (layer, expert) was last chosen; 0 for none."""
    pair = lidx * n_experts + ids
    order = stable_pair_order(pair)  # by pair, then evaluation order
    distance = np.zeros(len(pair), dtype=np.int64)
    same = pair[order[1:]] == pair[order[:-1]]
    distance[order[1:][same]] = (token[order[1:]] - token[order[:-1]])[same]
    return distance


def decode_ordinals(decode: Trace) -> np.ndarray:
    """Per decode activation, its token's ordinal among the decode steps (0, 1, ...)."""
    step = decode.rows["step"].astype(np.int64)
    new = np.ones(len(step), dtype=np.int64)
    new[1:] = step[1:] != step[:-1]
    return np.repeat(np.cumsum(new) - 1, decode.k)


def distance_distribution(distance: np.ndarray) -> list[dict[str, Any]]:
    """Share of the activations in each of `DISTANCE_BUCKETS`, then `first` (distance 0)."""
    lows = np.array([low for _, low in DISTANCE_BUCKETS], dtype=np.int64)
    bucket = np.searchsorted(lows, distance, side="right")  # 0: first use, j: bucket j - 1
    counts = np.bincount(bucket, minlength=len(lows) + 1)
    total = len(distance)
    out = [
        {"distance": label, "share": _share(int(counts[j + 1]), total)}
        for j, (label, _) in enumerate(DISTANCE_BUCKETS)
    ]
    out.append({"distance": "first", "share": _share(int(counts[0]), total)})
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
        "reuse_distance": distance_distribution(
            reuse_distances(lidx, decode_ordinals(decode), ids, n_experts)
        ),
        "hit_rates": capacity_hit_rates(decode, n_pairs),
    }
