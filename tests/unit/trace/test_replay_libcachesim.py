"""Exact miss counts against libCacheSim (FIFO, LRU, LFU, Belady) on flattened requests.

Every (step, layer) event is flattened into single-expert events in the engine's order, so
the atomic-event rules are inert and the classic policies must agree to the request. The
check takes any `.moetrace` path: synthetic traces now, a real tracer trace when one exists.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from appliance.trace import kernels
from appliance.trace.events import EventStream, single_item_stream, trace_events
from appliance.trace.format import read_trace, write_trace
from appliance.trace.replay import pool_hits
from appliance.trace.synth import TraceSynthSpec, synth_trace
from bench.lcs_oracle import LCS_POLICIES, lcs_misses, open_reader, write_oracle_trace


def our_misses(stream: EventStream, policy: str, capacity: int) -> int:
    flags = pool_hits(stream, kernels.CODES[policy], capacity, None, None)
    return int(len(flags) - flags.sum())


def crosscheck_trace(path: Path, work: Path, capacities: list[int]) -> int:
    """Compare per-layer (one libCacheSim cache per layer) and global miss counts; return checks."""
    events = trace_events(read_trace(path))
    checks = 0
    for scope in ("per-layer", "global"):
        for index, pool in enumerate(events.pools(scope)):
            flat = single_item_stream(pool)
            reader = open_reader(write_oracle_trace(work / f"{scope}-{index}.bin", flat.items))
            for policy in LCS_POLICIES:
                for capacity in capacities:
                    if capacity > pool.n_objects:
                        continue
                    ours = our_misses(flat, policy, capacity)
                    theirs = lcs_misses(reader, policy, capacity, flat.n_requests)
                    assert ours == theirs, (path.name, scope, index, policy, capacity)
                    checks += 1
    return checks


@pytest.mark.parametrize("skew", [0.0, 0.9, 1.8])
def test_synthetic_traces_match_libcachesim(tmp_path: Path, skew: float) -> None:
    spec = TraceSynthSpec(
        n_layers=3,
        n_experts=24,
        k=4,
        n_prompt=48,
        n_ubatch=16,
        n_decode=300,
        skew=skew,
        correlation=0.25,
        seed=int(skew * 10) + 5,
    )
    trace = synth_trace(spec)
    path = write_trace(tmp_path / "t.moetrace", trace.header, trace.rows)
    checks = crosscheck_trace(path, tmp_path, [1, 2, 4, 7, 12, 20, 24, 40])
    assert checks == 4 * (3 * 7 + 8)  # 3 layer caches x 7 capacities + 1 global x 8


def test_skews_give_different_traces() -> None:
    distinct = []
    for skew in (0.0, 0.9, 1.8):
        spec = TraceSynthSpec(
            n_layers=1, n_experts=64, k=2, n_prompt=0, n_decode=200, skew=skew, correlation=0.0, seed=1
        )
        ids = synth_trace(spec).rows["ids"].ravel()
        distinct.append(np.bincount(ids, minlength=64).max())
    assert distinct[0] < distinct[1] < distinct[2]
