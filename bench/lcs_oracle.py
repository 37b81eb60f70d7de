"""Run libCacheSim (the `libcachesim` package) on a flat request stream, as the replay oracle.

Requests are written as a libCacheSim oracleGeneral binary trace (per request: u32 time,
u64 object id, u32 size, i64 next access vtime) so the C reader and `process_trace` run at
full speed and Belady sees the future.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from appliance.trace.interchange import oracle_records

LCS_POLICIES = ("fifo", "lru", "lfu", "belady")


def write_oracle_trace(path: Path, objs: np.ndarray) -> Path:
    """Write a flat stream of object ids (size 1 each) as an oracleGeneral trace."""
    n = len(objs)
    # keep id 0 out: some readers treat it as empty
    rec = oracle_records(objs.astype(np.uint64) + 1, np.ones(n, dtype=np.int64), np.arange(n) // 1000)
    path.write_bytes(rec.tobytes())
    return path


def open_reader(path: Path):  # type: ignore[no-untyped-def]
    import libcachesim as lcs

    return lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)


def make_cache(policy: str, capacity: int):  # type: ignore[no-untyped-def]
    import libcachesim as lcs

    classes = {"fifo": lcs.FIFO, "lru": lcs.LRU, "lfu": lcs.LFU, "belady": lcs.Belady}
    return classes[policy](capacity, hashpower=16)


def lcs_misses(reader, policy: str, capacity: int, n_requests: int) -> int:  # type: ignore[no-untyped-def]
    """Miss count of libCacheSim's `policy` at `capacity` objects on a prepared reader."""
    cache = make_cache(policy, capacity)
    miss_ratio, _ = cache.process_trace(reader)
    return int(round(miss_ratio * n_requests))
