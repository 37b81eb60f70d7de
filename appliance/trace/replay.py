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
from appliance.trace.format import KIND_DECODE
from appliance.trace.names import ADMISSIONS

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
        next_use = _next_use(pool, code)
    return kernels.simulate(code, pool, capacity, counts, next_use)


def _next_use(pool: EventStream, code: int) -> np.ndarray:
    if code == kernels.BELADY:
        return kernels.next_use_events(pool.ptr, pool.items, pool.n_objects)
    return np.zeros(0, dtype=np.int64)


def pool_hits_bytes(
    pool: EventStream,
    code: int,
    obj_bytes: np.ndarray,
    budget: int,
    admission: str,
    counts: np.ndarray | None,
) -> np.ndarray:
    """Per request of one pool under a byte budget (each object `obj_bytes` of it): 1 hit, 0 miss."""
    after = check_admission(admission) == "after-event"
    if after:
        if pool.last_row_slot is None:
            raise ConfigError("after-event replay needs the events built with row_order=True")
        touch = pool.last_row_slot + 1
    else:
        touch = np.zeros(0, dtype=np.int64)  # during-event: the kernel's tick is the position + 1
    return kernels.simulate_bytes(
        code,
        pool.ptr,
        pool.items,
        touch,
        pool.step,
        pool.layer_index,
        pool.n_layers,
        obj_bytes,
        budget,
        after,
        np.zeros(pool.n_objects) if counts is None else counts,
        _next_use(pool, code),
    )


def check_admission(admission: str) -> str:
    if admission not in ADMISSIONS:
        raise ConfigError(f"admission must be one of {', '.join(ADMISSIONS)}, got {admission!r}")
    return admission


def check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise ConfigError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")


def layer_bytes(setup: ReplaySetup) -> np.ndarray:
    """Bytes of one expert per MoE layer (moe_layers order); one clear error when unknown."""
    per_layer = setup.expert_bytes or {}
    missing = [layer for layer in setup.events.moe_layers if layer not in per_layer]
    if missing:
        raise ConfigError(
            "a byte budget needs the bytes of one expert per MoE layer, and "
            + (f"layer {missing[0]} has none" if per_layer else "none are known")
            + ": pass --expert-bytes N or --model GGUF (the trace's header records none)"
        )
    return np.array([per_layer[layer] for layer in setup.events.moe_layers], dtype=np.int64)


def pool_budget(budget: int, scope: str, n_layers: int) -> int:
    """The bytes one pool may hold: the whole budget (global), or an equal share per MoE layer."""
    return budget if scope == "global" else budget // n_layers


def check_budget(setup: ReplaySetup, budget: int, scope: str, admission: str = "during-event") -> None:
    """Expert sizes must be known, and under `during-event` every pool must hold the k experts
    one token needs at its largest layer (`after-event` lets an event overshoot any budget)."""
    sizes = layer_bytes(setup)
    if admission == "after-event":
        return
    need = setup.k * int(sizes.max())
    share = pool_budget(budget, scope, len(sizes))
    if share < need:
        whole = need if scope == "global" else need * len(sizes)
        raise ConfigError(
            f"budget {budget} bytes "
            + ("" if scope == "global" else f"({share} per MoE layer, split equally) ")
            + f"cannot hold the {setup.k} experts of {int(sizes.max())} bytes each token needs at "
            f"a layer; use a budget of at least {whole} bytes"
        )


def pool_objects_bytes(sizes: np.ndarray, pool: EventStream, j: int, scope: str) -> np.ndarray:
    """Bytes of every object of pool j (per-layer pools come in moe_layers order)."""
    if scope == "global":
        return np.repeat(sizes, pool.n_objects // len(sizes))
    return np.full(pool.n_objects, sizes[j], dtype=np.int64)


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


def _tally(
    setup: ReplaySetup, scope: str, flags_of: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(requests, hits, decode requests, decode hits) per MoE layer; flags_of(pool, index) is the
    pool's per-request hit flags. Pools are built and replayed one at a time."""
    n_layers = len(setup.events.moe_layers)
    counts = np.zeros((4, n_layers), dtype=np.int64)
    kinds = setup.events.step_kind
    step_kind = np.zeros(0, dtype=np.int64) if kinds is None else kinds
    for j, pool in enumerate(setup.events.iter_pools(scope)):
        hits = flags_of(pool, j)
        counts += kernels.layer_tally(
            pool.ptr, hits, pool.layer_index, pool.step, step_kind, KIND_DECODE, n_layers
        )
    return counts[0], counts[1], counts[2], counts[3]


def _result(setup: ReplaySetup, head: dict[str, Any], tally: tuple[np.ndarray, ...]) -> dict[str, Any]:
    requests, hits, decode_requests, decode_hits = tally
    out = head | summarize(setup, requests, hits)
    out["decode"] = summarize(setup, decode_requests, decode_hits)["total"]
    return out


def _static_counts(setup: ReplaySetup, code: int, scope: str) -> list[np.ndarray | None]:
    if code == kernels.STATIC_HOT:
        return list(calibration_counts(setup, scope))
    return [None] * (len(setup.events.moe_layers) if scope == "per-layer" else 1)


def replay_one(
    setup: ReplaySetup, policy: str, capacity: int, scope: str, admission: str = "during-event"
) -> dict[str, Any]:
    """Replay one policy at one capacity (objects per pool) in one scope."""
    code = check_policy(policy)
    check_capacity(capacity, setup.k)
    check_scope(scope)
    after = check_admission(admission) == "after-event"
    counts = _static_counts(setup, code, scope)

    def flags_of(pool: EventStream, j: int) -> np.ndarray:
        if after:  # the byte kernel with every object one byte: a capacity in objects
            ones = np.ones(pool.n_objects, dtype=np.int64)
            return pool_hits_bytes(pool, code, ones, capacity, admission, counts[j])
        return pool_hits(pool, code, capacity, counts[j], None)

    head = {"policy": policy, "capacity": capacity, "scope": scope, "admission": admission}
    return _result(setup, head, _tally(setup, scope, flags_of))


def replay_budget(
    setup: ReplaySetup, policy: str, budget: int, scope: str, admission: str = "during-event"
) -> dict[str, Any]:
    """Replay one policy under a byte budget (global: one pool of `budget` bytes; per-layer: an
    equal share per MoE layer), every expert costing its layer's bytes."""
    code = check_policy(policy)
    check_scope(scope)
    check_admission(admission)
    check_budget(setup, budget, scope, admission)
    sizes = layer_bytes(setup)
    counts = _static_counts(setup, code, scope)
    share = pool_budget(budget, scope, len(sizes))

    def flags_of(pool: EventStream, j: int) -> np.ndarray:
        obj_bytes = pool_objects_bytes(sizes, pool, j, scope)
        return pool_hits_bytes(pool, code, obj_bytes, share, admission, counts[j])

    head = {"policy": policy, "budget_bytes": budget, "scope": scope, "admission": admission}
    out = _result(setup, head, _tally(setup, scope, flags_of))
    if code == kernels.BELADY:
        out["belady"] = belady_note(setup, sizes, budget, scope, admission)
    return out


def belady_note(
    setup: ReplaySetup, sizes: np.ndarray, budget: int, scope: str, admission: str
) -> dict[str, Any]:
    """What the `belady` row is under a byte budget, and the bound on hits that may be claimed
    (docs/sweeps.md, "Byte budgets")."""
    mixed = scope == "global" and len(set(sizes.tolist())) > 1
    if admission == "after-event":
        return {
            "optimal": False,
            "meaning": "furthest-next-use eviction after each event; no optimality claimed",
            "hit_bound": None,
        }
    if not mixed:
        return {"optimal": True, "meaning": "optimal: one expert size per pool", "hit_bound": None}
    capacity = budget // int(sizes.min())
    bound = replay_one(setup, "belady", capacity, "global")
    return {
        "optimal": False,
        "meaning": "furthest-next-use heuristic: expert sizes are mixed",
        "hit_bound": {"capacity": capacity, "hits": bound["total"]["hits"]},
    }


def replay_report(
    setup: ReplaySetup,
    header: dict[str, Any],
    policies: list[str],
    capacities: list[int],
    scope: str,
    budgets: list[int] | None = None,
    admission: str = "during-event",
) -> dict[str, Any]:
    """Every policy at every capacity (or byte budget), plus what was replayed (JSON-ready,
    deterministic)."""
    for policy in policies:
        check_policy(policy)
    for capacity in capacities:
        check_capacity(capacity, setup.k)
    check_admission(admission)
    for budget in budgets or []:
        check_budget(setup, budget, scope, admission)
    stream = setup.events.stream
    results = [
        replay_one(setup, policy, capacity, scope, admission)
        for policy in policies
        for capacity in capacities
    ] + [
        replay_budget(setup, policy, budget, scope, admission)
        for policy in policies
        for budget in budgets or []
    ]
    return {
        "trace": trace_identity(header),
        "scope": scope,
        "admission": admission,
        "events": stream.n_events,
        "requests": stream.n_requests,
        "expert_bytes": None
        if setup.expert_bytes is None
        else {str(layer): n for layer, n in sorted(setup.expert_bytes.items())},
        "calibration": None
        if "static-hot" not in policies
        else ("calibration trace" if setup.calibration else "replayed trace"),
        "results": results,
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
