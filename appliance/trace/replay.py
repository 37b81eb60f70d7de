"""Replay a trace through expert-cache policies: hits, misses, hit rate, bytes moved.

Event semantics, policies and tie-breaking are defined in `appliance.trace.kernels`. Results
are plain dicts of ints, strings and rounded floats in a fixed key order, so the same inputs
give byte-identical JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from appliance.core.errors import ConfigError
from appliance.trace import kernels
from appliance.trace.events import SCOPES, EventStream, TraceEvents

RATE_DIGITS = 6


@dataclass(frozen=True)
class ReplaySetup:
    """What a replay needs besides policy and capacity."""

    events: TraceEvents
    k: int
    expert_bytes: dict[int, int] | None  # MoE block index -> bytes of one expert
    calibration: TraceEvents | None = None


def check_capacity(capacity: int, k: int) -> None:
    if capacity < k:
        raise ConfigError(
            f"capacity {capacity} is below the {k} experts each token needs at a "
            f"layer: under atomic events all of them must be resident together; "
            f"use a capacity of at least {k}"
        )


def check_policy(policy: str) -> int:
    if policy not in kernels.CODES:
        raise ConfigError(f"unknown policy {policy!r}; choose from {', '.join(kernels.POLICIES)}")
    return kernels.CODES[policy]


def calibration_counts(setup: ReplaySetup, scope: str) -> list[np.ndarray]:
    """Per pool, how often each object was requested in the calibration trace (else this one)."""
    source = setup.calibration or setup.events
    if source.n_experts != setup.events.n_experts or source.moe_layers != setup.events.moe_layers:
        raise ConfigError(
            "calibration trace has different experts or MoE layers than the "
            "replayed trace; calibrate with a trace of the same model"
        )
    return [
        np.bincount(pool.items, minlength=pool.n_objects).astype(np.float64) for pool in source.pools(scope)
    ]


def pool_hits(
    pool: EventStream, code: int, capacity: int, counts: np.ndarray | None, next_use: np.ndarray | None
) -> np.ndarray:
    """Per request of one pool: 1 hit, 0 miss."""
    if counts is None:
        counts = np.zeros(pool.n_objects)
    if next_use is None:
        next_use = (
            kernels.next_use_events(pool.ptr, pool.items, pool.n_objects)
            if code == kernels.BELADY
            else np.zeros(0, dtype=np.int64)
        )
    return kernels.simulate(
        code,
        pool.ptr,
        pool.items,
        pool.step,
        pool.layer_index,
        pool.n_layers,
        pool.n_objects,
        capacity,
        counts,
        next_use,
    )


def metrics(requests: int, hits: int, bytes_per_miss: int | None) -> dict[str, Any]:
    misses = requests - hits
    return {
        "requests": requests,
        "hits": hits,
        "misses": misses,
        "hit_rate": round(hits / requests, RATE_DIGITS) if requests else None,
        "bytes_moved": None if bytes_per_miss is None else misses * bytes_per_miss,
    }


def summarize(
    setup: ReplaySetup, requests_per_layer: np.ndarray, hits_per_layer: np.ndarray
) -> dict[str, Any]:
    """Per-layer and total metrics from per-layer counts (layers in moe_layers order)."""
    layers = []
    total_bytes: int | None = 0
    for j, block in enumerate(setup.events.moe_layers):
        per_miss = None if setup.expert_bytes is None else setup.expert_bytes[block]
        row = {"layer": block} | metrics(int(requests_per_layer[j]), int(hits_per_layer[j]), per_miss)
        layers.append(row)
        total_bytes = (
            None if row["bytes_moved"] is None or total_bytes is None else total_bytes + row["bytes_moved"]
        )
    total = metrics(int(requests_per_layer.sum()), int(hits_per_layer.sum()), None)
    total["bytes_moved"] = total_bytes
    return {"total": total, "layers": layers}


def replay_one(setup: ReplaySetup, policy: str, capacity: int, scope: str) -> dict[str, Any]:
    """Replay one policy at one capacity (objects per pool) in one scope."""
    code = check_policy(policy)
    check_capacity(capacity, setup.k)
    if scope not in SCOPES:
        raise ConfigError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    pools = setup.events.pools(scope)
    counts = calibration_counts(setup, scope) if code == kernels.STATIC_HOT else [None] * len(pools)
    n_layers = len(setup.events.moe_layers)
    requests = np.zeros(n_layers, dtype=np.int64)
    hits = np.zeros(n_layers, dtype=np.int64)
    for pool, count in zip(pools, counts, strict=True):
        flags = pool_hits(pool, code, capacity, count, None)
        item_layer = pool.item_layer_index()
        requests += np.bincount(item_layer, minlength=n_layers)
        hits += np.bincount(item_layer, weights=flags, minlength=n_layers).astype(np.int64)
    return {"policy": policy, "capacity": capacity, "scope": scope} | summarize(setup, requests, hits)


def replay_report(
    setup: ReplaySetup, header: dict[str, Any], policies: list[str], capacities: list[int], scope: str
) -> dict[str, Any]:
    """Every policy at every capacity, plus what was replayed (JSON-ready, deterministic)."""
    for policy in policies:
        check_policy(policy)
    for capacity in capacities:
        check_capacity(capacity, setup.k)
    stream = setup.events.stream
    return {
        "trace": trace_identity(header),
        "scope": scope,
        "events": stream.n_events,
        "requests": stream.n_requests,
        "expert_bytes": None
        if setup.expert_bytes is None
        else {str(layer): n for layer, n in sorted(setup.expert_bytes.items())},
        "calibration": None
        if "static-hot" not in policies
        else ("calibration trace" if setup.calibration else "replayed trace"),
        "results": [
            replay_one(setup, policy, capacity, scope) for policy in policies for capacity in capacities
        ],
    }


def trace_identity(header: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "arch",
        "model_file",
        "model_sha256",
        "n_layers",
        "n_experts",
        "n_expert_used",
        "moe_layers",
        "n_prompt_tokens",
        "n_predict",
        "n_ubatch",
    )
    return {key: header.get(key) for key in keys}


def uniform_expert_bytes(moe_layers: list[int], n: int) -> dict[int, int]:
    if n <= 0:
        raise ConfigError(f"--expert-bytes must be a positive number of bytes or 'auto', got {n}")
    return {layer: n for layer in moe_layers}
