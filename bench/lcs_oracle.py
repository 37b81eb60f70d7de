"""Run libCacheSim (the `libcachesim` package) on a flat request stream, as the replay oracle.

Requests are written as a libCacheSim oracleGeneral binary trace (per request: u32 time,
u64 object id, u32 size, i64 next access vtime) so the C reader and `process_trace` run at
full speed and Belady sees the future.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ORACLE_DTYPE = np.dtype([("time", "<u4"), ("obj", "<u8"), ("size", "<u4"), ("next", "<i8")])
LCS_POLICIES = ("fifo", "lru", "lfu", "belady")


def next_vtime(objs: np.ndarray) -> np.ndarray:
    """Index (vtime) of each request's next request for the same object, -1 when none."""
    n = len(objs)
    order = np.lexsort((np.arange(n), objs))
    nxt = np.full(n, -1, dtype=np.int64)
    same = objs[order[1:]] == objs[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def write_oracle_trace(path: Path, objs: np.ndarray) -> Path:
    """Write a flat stream of object ids (size 1 each) as an oracleGeneral trace."""
    rec = np.zeros(len(objs), dtype=ORACLE_DTYPE)
    rec["time"] = np.arange(len(objs)) // 1000
    rec["obj"] = objs.astype(np.uint64) + 1  # keep id 0 out: some readers treat it as empty
    rec["size"] = 1
    rec["next"] = next_vtime(objs)
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
