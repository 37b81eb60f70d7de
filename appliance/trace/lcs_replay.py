"""libCacheSim's policies (the `libcachesim` package) on a trace's request-level view.

The request-level view is what `interchange.request_stream` gives: each (step, layer) event's
distinct experts as single requests in evaluation order, each object of size 1, so capacity
is a number of experts as in our replay. There are no MoE-atomic events (an expert requested
in an event may evict another of the same event) and no pins: these figures show what a
classic cache would do, beside ours, not what the engine can do.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from appliance.core import atomic
from appliance.core.errors import ConfigError
from appliance.trace.events import EventStream, TraceEvents, single_item_stream
from appliance.trace.interchange import oracle_records
from appliance.trace.replay import metrics

LABEL = "request-level (no MoE-atomic events, no pins)"
# Our name -> the libcachesim class; deterministic policies that take a size in objects.
POLICIES = {
    "arc": "ARC",
    "belady": "Belady",
    "cacheus": "Cacheus",
    "clock": "Clock",
    "clockpro": "ClockPro",
    "fifo": "FIFO",
    "hyperbolic": "Hyperbolic",
    "lecar": "LeCaR",
    "lfu": "LFU",
    "lhd": "LHD",
    "lirs": "LIRS",
    "lru": "LRU",
    "lruk": "LRUK",
    "mq": "MQ",
    "s3fifo": "S3FIFO",
    "sieve": "Sieve",
    "slru": "SLRU",
    "twoq": "TwoQ",
    "wtinylfu": "WTinyLFU",
}

# Below these sizes libcachesim 0.3.5 aborts the process or misses every request (S3-FIFO's
# small queue is a tenth of the cache, W-TinyLFU's window a hundredth, 2Q's and SLRU's queues
# a quarter): refused before it runs. Its LFUDA does not finish on small traces: left out.
MIN_CAPACITY = {"s3fifo": 20, "wtinylfu": 100, "twoq": 4, "slru": 4}


def check_policies(names: list[str]) -> list[str]:
    if not names:
        raise ConfigError(f"--engine libcachesim needs --policy; choose from {', '.join(POLICIES)}")
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ConfigError(f"unknown libCacheSim policy {unknown[0]!r}; choose from {', '.join(POLICIES)}")
    return names


def check_capacities(policies: list[str], capacities: list[int]) -> None:
    for policy in policies:
        low = MIN_CAPACITY.get(policy, 1)
        small = [c for c in capacities if c < low]
        if small:
            raise ConfigError(
                f"libCacheSim's {policy} needs a capacity of at least {low} experts "
                f"(below that its queues hold no object), got {small[0]}"
            )


def _module() -> Any:
    try:
        import libcachesim
    except ImportError:
        raise ConfigError(
            "--engine libcachesim needs the libcachesim package: pip install 'libcachesim>=0.3.5'"
        ) from None
    return libcachesim


def pool_misses(
    lcs: Any, work: Path, index: int, pool: EventStream, runs: list[tuple[str, int]]
) -> list[int]:
    """Misses of each (policy, capacity) on one pool's flattened requests."""
    flat = single_item_stream(pool)
    n = flat.n_requests
    if not n:
        return [0] * len(runs)
    path = work / f"pool-{index}.oracleGeneral"
    ones = np.ones(n, dtype=np.int64)
    atomic.write_bytes(path, oracle_records(flat.items.astype(np.uint64) + 1, ones, flat.step).tobytes())
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    hashpower = max(12, int(pool.n_objects).bit_length() + 1)
    out = []
    for policy, capacity in runs:
        cache = getattr(lcs, POLICIES[policy])(capacity, hashpower=hashpower)
        miss_ratio, _ = cache.process_trace(reader)
        out.append(int(round(miss_ratio * n)))
    return out


def lcs_report(events: TraceEvents, policies: list[str], capacities: list[int], scope: str) -> dict[str, Any]:
    """Every libCacheSim policy at every capacity (objects per pool) in one scope."""
    check_policies(policies)
    check_capacities(policies, capacities)
    lcs = _module()
    runs = [(p, c) for p in policies for c in capacities]
    pools = events.pools(scope)
    requests = [pool.n_requests for pool in pools]
    per_pool = []
    with tempfile.TemporaryDirectory(prefix="appliance-lcs-") as work:
        for index, pool in enumerate(pools):
            per_pool.append(pool_misses(lcs, Path(work), index, pool, runs))
    results = []
    for j, (policy, capacity) in enumerate(runs):
        misses = sum(p[j] for p in per_pool)
        total = sum(requests)
        results.append(
            {
                "policy": policy,
                "capacity": capacity,
                "scope": scope,
                "total": metrics(total, total - misses, None),
            }
        )
    return {"engine": "libcachesim", "view": LABEL, "scope": scope, "results": results}
