"""Property: Belady's misses are never above any other policy's, at every capacity."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.trace import kernels
from appliance.trace.events import trace_events
from appliance.trace.format import Trace, row_dtype
from appliance.trace.replay import pool_hits


@st.composite
def small_traces(draw: st.DrawFn) -> Trace:
    n_layers = draw(st.integers(1, 3))
    n_experts = draw(st.integers(2, 8))
    k = draw(st.integers(1, min(3, n_experts)))
    tokens_per_step = draw(st.lists(st.integers(1, 4), min_size=1, max_size=12))
    rows = []
    pos = 0
    for step, n_tok in enumerate(tokens_per_step):
        picks = [draw(st.permutations(range(n_experts)))[:k] for _ in range(n_tok * n_layers)]
        for layer in range(n_layers):
            for t in range(n_tok):
                rows.append((step, layer, 0 if n_tok > 1 else 1, 0, pos + t, picks[layer * n_tok + t]))
        pos += n_tok
    arr = np.zeros(len(rows), dtype=row_dtype(k, False))
    for i, (step, layer, kind, _, p, ids) in enumerate(rows):
        arr[i]["step"], arr[i]["layer"], arr[i]["kind"], arr[i]["pos"] = step, layer, kind, p
        arr[i]["ids"] = ids
    header = {
        "format": "moetrace",
        "version": 1,
        "n_layers": n_layers,
        "moe_layers": list(range(n_layers)),
        "n_experts": n_experts,
        "n_expert_used": k,
        "has_weights": False,
    }
    return Trace(header=header, rows=arr)


@settings(max_examples=150, deadline=None)
@given(small_traces())
def test_belady_never_worse(trace: Trace) -> None:
    events = trace_events(trace)
    for scope in ("per-layer", "global"):
        for pool in events.pools(scope):
            counts = np.bincount(pool.items, minlength=pool.n_objects).astype(np.float64)
            for capacity in range(trace.k, pool.n_objects + 1):
                misses = {}
                for policy in kernels.POLICIES:
                    flags = pool_hits(pool, kernels.CODES[policy], capacity, counts, None)
                    misses[policy] = int(len(flags) - flags.sum())
                assert all(misses["belady"] <= m for m in misses.values()), (scope, capacity, misses)
