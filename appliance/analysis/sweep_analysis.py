"""A memory sweep's predictions beside its measurements, trial by trial.

For each trial with a route trace: the expert capacity its limit leaves, the decode reads
LRU, FIFO, Least-Stale and Belady would cause at that capacity (replaying the trial's own
trace), the decode reads the tracer measured (`/proc/self/io`, phase by phase), their ratios,
the decode read bandwidth as a fraction of the disk probe's at the queue depth the variant reads
at (`disk_probe_depth`, appliance.runs.read_depth), and a roofline prediction of decode
tokens/s. The model behind the numbers is written down in docs/sweeps.md. A trial whose routing
was forced from a routes file (trial.json `routes`) says whether its trace holds exactly
those routes (`trace_equals_routes`): then its replay is the replay of the routes' source.
A trial with a device reads from disk only what its placement leaves on the host (`host_side`):
its host layers' experts beside the host's non-expert bytes.
"""

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from appliance.analysis.capacity import ModelExperts, anon_bytes, budget_for, model_experts
from appliance.analysis.contamination import comparable, flag_sweep_row
from appliance.analysis.prefill import prefill_row
from appliance.analysis.stats import model_read_bytes
from appliance.analysis.stats import ratio_or_none as _ratio
from appliance.core.digests import sha256_bytes
from appliance.core.errors import ConfigError
from appliance.core.strict_load import read_bytes
from appliance.planner.accounting import Accounting, account_file
from appliance.planner.offload import host_non_expert_bytes
from appliance.runs.placement import offload_of, placement_options
from appliance.runs.read_depth import PROBE_DEPTHS, probe_depth
from appliance.runs.status import TrialStatus
from appliance.runs.timing import EngineIo, TimingRecord, timing_of
from appliance.trace import kernels
from appliance.trace.calibration import layer_slice
from appliance.trace.events import EventStream, trace_events
from appliance.trace.format import Trace, read_trace
from appliance.trace.replay import pool_hits, pool_hits_bytes, pool_objects_bytes
from appliance.trace.routes import follows_routes

POLICIES = ("lru", "fifo", "least-stale", "belady")
DECODE_KIND = 1  # trace row kind of a decode step (0: prompt)
HOST_BACKEND = "CPU"  # trial.json engine_backend of a trial without a device
PHASE_TOLERANCE = 0.10  # phase reads must sum to within this of the cgroup's block reads


def phase_reads(timing: TimingRecord) -> dict[str, int] | None:
    """Device reads of load (from the process's start), prefill and decode, from the
    tracer's cumulative `io` counters; None for a tracer without them."""
    io = timing.io or EngineIo()
    ends = [io.load_end, io.prefill_end, io.decode_end]
    points = [end.read_bytes if end is not None else -1 for end in ends]
    if any(v < 0 for v in points):
        return None
    load, prefill, decode = points
    faults = [end.majflt for end in ends if end is not None and end.majflt is not None and end.majflt >= 0]
    out = {"load": load, "prefill": prefill - load, "decode": decode - prefill, "total": decode}
    if len(faults) == len(ends):
        out |= {
            "major_faults_load": faults[0],
            "major_faults_prefill": faults[1] - faults[0],
            "major_faults_decode": faults[2] - faults[1],
        }
    return out


def probe_summary(record: TimingRecord) -> dict[str, Any]:
    """Bandwidth of each probe measurement (device bytes over seconds) and the reference of the
    roofline: expert-size reads at queue depth 1, what one faulting decode thread can at best
    expect (a trial's `disk_fraction` uses the depth its variant reads at: `probe_bandwidths`)."""
    rows = []
    for m in record.measurements or ():
        device = (
            m.device_read_bytes if m.device_read_bytes is not None and m.device_read_bytes >= 0 else m.bytes
        )
        rows.append(
            {
                **m.to_json(),
                "bytes_per_s": device / m.seconds if m.seconds > 0 else None,
                "device_fraction": device / m.bytes if m.bytes else None,
            }
        )

    def pick(block: int | None, depth: int) -> float | None:
        for row in rows:
            same_block = row["block_bytes"] != 4096 if block is None else row["block_bytes"] == block
            if same_block and row["queue_depth"] == depth:
                return row["bytes_per_s"]
        return None

    return {
        "file_bytes": record.file_bytes,
        "advice": record.advice,
        "measurements": rows,
        "expert_qd1_bytes_per_s": pick(None, 1),
        "expert_qd8_bytes_per_s": pick(None, 8),
        "page_qd1_bytes_per_s": pick(4096, 1),
        "page_qd8_bytes_per_s": pick(4096, 8),
        "reference": "expert_qd1_bytes_per_s",
    }


def probe_bandwidths(probe: dict[str, Any] | None) -> dict[int, float | None]:
    """Queue depth -> the probe's expert-size bandwidth at that depth (PROBE_DEPTHS); {} without
    a probe."""
    if not probe:
        return {}
    return {depth: probe.get(f"expert_qd{depth}_bytes_per_s") for depth in PROBE_DEPTHS}


def engine_command(trial: dict[str, Any]) -> list[str]:
    """The engine's command line as the trial recorded it (trial.json `container.command`: the
    tool's own arguments, the profile's and the variant's); [] when it recorded none."""
    command = (trial.get("container") or {}).get("command")
    return [str(a) for a in command] if isinstance(command, list) else []


def host_side(
    trial: dict[str, Any], trace: Trace | None, experts: ModelExperts, accounting: Accounting | None
) -> tuple[Trace | None, ModelExperts]:
    """What a trial reads from the model file: with a device (its placement options put tensors
    there) its trace and the model's experts narrowed to the layers whose experts stay on the
    host, the non-expert bytes to the host's (no trace when every layer's experts are on the
    device); on the host's backend (placement options without a device offload nothing), or
    without the model's accounting, both as they are."""
    if accounting is None or trial.get("engine_backend") in (None, HOST_BACKEND):
        return trace, experts
    facts = accounting.facts
    offload = offload_of(placement_options(tuple(engine_command(trial))), facts.layers + facts.nextn_layers)
    if offload is None or not offload.offloads(facts.layers):
        return trace, experts
    host = sorted(layer for layer in experts.expert_bytes if not offload.on_device(layer, "routed_experts"))
    expert_bytes = {layer: experts.expert_bytes[layer] for layer in host}
    non_expert = host_non_expert_bytes(accounting, offload, experts.file_bytes)
    narrowed = dataclasses.replace(
        experts,
        file_bytes=non_expert + sum(expert_bytes.values()) * experts.n_experts,
        expert_bytes=expert_bytes,
    )
    if trace is None or not host:
        return None, narrowed
    return layer_slice(trace, host), narrowed


def predicted_reads(trace: Trace, capacity: int, experts: ModelExperts) -> dict[str, Any]:
    """Per policy, misses (whole trace and decode steps) and decode bytes at a capacity of whole
    experts (the engine's expert cache counts in experts), one global pool of (layer, expert)
    objects; plus the decode steps' compulsory (first-touch) misses."""

    def hits(pool: EventStream, code: int, _sizes: np.ndarray) -> np.ndarray:
        return pool_hits(pool, code, capacity, None, None)

    return _predicted(trace, experts, hits, capacity, replay_bound=False)


def predicted_budget_reads(trace: Trace, budget: int, experts: ModelExperts) -> dict[str, Any]:
    """The same under a byte budget (what a memory limit leaves, `budget_for`): each expert
    costs its own layer's bytes. With one expert size everywhere this is the count replay at
    `budget // size`; with mixed sizes `belady` is furthest-next-use, no longer optimal, and
    `belady_bound` is the count Belady at `budget // smallest expert` (docs/sweeps.md)."""

    def hits(pool: EventStream, code: int, sizes: np.ndarray) -> np.ndarray:
        obj_bytes = pool_objects_bytes(sizes, pool, 0, "global")
        return pool_hits_bytes(pool, code, obj_bytes, budget, "during-event", None)

    mixed = experts.smallest_expert != experts.one_expert
    return _predicted(trace, experts, hits, budget // experts.smallest_expert, replay_bound=mixed)


def _predicted(
    trace: Trace,
    experts: ModelExperts,
    hits_of: Callable[[EventStream, int, np.ndarray], np.ndarray],
    bound: int,
    replay_bound: bool,
) -> dict[str, Any]:
    """Every policy's misses and decode bytes, and `belady_bound`: the decode capacity misses of
    the count Belady at `bound` experts (unless `replay_bound`, the `belady` row is it), each
    charged the smallest expert's bytes, the floor that no cache holding at most `bound`
    experts at once reads below (contamination's floor)."""
    events = trace_events(trace)
    pool = events.stream
    sizes = np.diff(pool.ptr)
    step_kind = np.zeros(int(trace.rows["step"].max()) + 1 if len(trace.rows) else 1, dtype=np.int64)
    step_kind[trace.rows["step"].astype(np.int64)] = trace.rows["kind"]
    decode = np.repeat(step_kind[pool.step] == DECODE_KIND, sizes)
    layer_bytes = np.array([experts.expert_bytes[layer] for layer in events.moe_layers], dtype=np.int64)
    item_bytes = layer_bytes[pool.item_layer_index()]
    _, first = np.unique(pool.items, return_index=True)
    compulsory = np.zeros(len(pool.items), dtype=bool)
    compulsory[first] = True
    capacity_miss = decode & ~compulsory
    out: dict[str, Any] = {
        "decode_requests": int(decode.sum()),
        "compulsory_decode_misses": int((compulsory & decode).sum()),
        "policies": {},
    }
    misses = {}
    for policy in POLICIES:
        miss = misses[policy] = ~hits_of(pool, kernels.CODES[policy], layer_bytes).astype(bool)
        out["policies"][policy] = {
            "misses": int(miss.sum()),
            "decode_misses": int((miss & decode).sum()),
            "decode_capacity_misses": int((miss & capacity_miss).sum()),
            "decode_read_bytes": int(item_bytes[miss & decode].sum()),
            "decode_capacity_read_bytes": int(item_bytes[miss & capacity_miss].sum()),
        }
    bound_miss = misses["belady"]
    if replay_bound:
        bound_miss = ~pool_hits(pool, kernels.BELADY, bound, None, None).astype(bool)
    bound_misses = int((bound_miss & capacity_miss).sum())
    out["belady_bound"] = {
        "capacity": bound,
        "decode_capacity_misses": bound_misses,
        "decode_capacity_read_bytes": bound_misses * experts.smallest_expert,
    }
    return out


def trial_row(
    trial: dict[str, Any], trace: Trace | None, experts: ModelExperts, probe_bps: dict[int, float | None]
) -> dict[str, Any]:
    """Everything the sweep reports about one trial (roofline filled in later). `probe_bps`
    maps queue depth to the probe's expert-size bandwidth (`probe_bandwidths`): `disk_fraction`
    is the decode read bandwidth over the one at `disk_probe_depth`, the depth the trial's
    engine arguments read at (appliance.runs.read_depth)."""
    timing = timing_of(trial)
    tokens = timing.n_decode_tokens
    decode_s = timing.decode_s
    phases = phase_reads(timing)
    cgroup_total = model_read_bytes(trial)
    anon = anon_bytes(trial)
    limit = int(trial["memory_limit"])
    row: dict[str, Any] = {
        "trial": trial["dir"],
        "variant": trial["variant"],
        "repeat": trial["repeat"],
        "memory_limit": limit,
        "status": trial.get("status"),
        "decode_tokens": tokens,
        "decode_s": decode_s,
        "decode_tps": timing.decode_tokens_per_s,
        "anon_bytes": anon,
        "phase_reads": phases,
        "cgroup_block_read_bytes": cgroup_total,
    }
    if phases is not None and cgroup_total:
        row["phase_sum_over_cgroup"] = phases["total"] / cgroup_total
    if trace is None or not tokens or trial.get("status") != TrialStatus.OK:
        return row
    budget, clamped = budget_for(limit, anon, experts)
    predicted = predicted_budget_reads(trace, budget, experts)
    measured = phases["decode"] if phases is not None else None
    lru = predicted["policies"]["lru"]["decode_read_bytes"]
    belady = predicted["policies"]["belady"]["decode_read_bytes"]
    bandwidth = measured / decode_s if measured is not None and decode_s else None
    command = engine_command(trial)
    depth = probe_depth(command)
    row |= {
        "budget_bytes": budget,
        "capacity_experts": budget // experts.one_expert,
        "capacity_clamped_to_k": clamped,
        "predicted": predicted,
        "measured_decode_read_bytes": measured,
        "reads_per_token": {
            "measured": _ratio(measured, tokens),
            "lru": lru / tokens,
            "belady": belady / tokens,
        },
        "measured_over_lru": _ratio(measured, lru),
        "measured_over_belady": _ratio(measured, belady),
        "belady_over_lru": _ratio(belady, lru),
        "decode_read_bytes_per_s": bandwidth,
        "disk_probe_depth": depth,
        "disk_fraction": _ratio(bandwidth, probe_bps.get(depth)),
        "prefill": prefill_row(
            timing, phases["prefill"] if phases is not None else None, trace, experts, probe_bps, command
        ),
    }
    flag_sweep_row(row)
    return row


def add_roofline(rows: list[dict[str, Any]], probe_bps: float | None, key: str = "roofline") -> None:
    """Roofline per trial: compute time per token at full residency (the variant's trials at
    the largest limit, less the time their own decode reads take at the probed bandwidth)
    plus the LRU-predicted reads per token over the probed bandwidth. Stored under `key`."""
    if not probe_bps:
        return
    done = [r for r in rows if r.get("reads_per_token") and r.get("decode_s") and comparable(r)]
    for variant in sorted({r["variant"] for r in done}):
        mine = [r for r in done if r["variant"] == variant]
        top = max(r["memory_limit"] for r in mine)
        compute = statistics.median(
            max(0.0, r["decode_s"] - (r["measured_decode_read_bytes"] or 0) / probe_bps) / r["decode_tokens"]
            for r in mine
            if r["memory_limit"] == top
        )
        for r in mine:
            per_token = compute + r["reads_per_token"]["lru"] / probe_bps
            predicted = 1 / per_token if per_token > 0 else None
            ratio = _ratio(r["decode_tps"], predicted)
            r[key] = {
                "compute_s_per_token": compute,
                "reference_limit": top,
                "predicted_decode_tps": predicted,
                "error": None if ratio is None else ratio - 1,
            }


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _one(values: set[Any]) -> Any:
    """The value when every row has the same one, else None."""
    return next(iter(values)) if len(values) == 1 else None


def summary_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (limit, variant), limits ascending, variants in run order."""
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    out = []
    for limit in sorted({r["memory_limit"] for r in rows}):
        for variant in variants:
            mine = [
                r
                for r in rows
                if r["memory_limit"] == limit
                and r["variant"] == variant
                and r.get("reads_per_token")
                and comparable(r)
            ]
            if not mine:
                continue
            out.append(
                {
                    "memory_limit": limit,
                    "variant": variant,
                    "n": len(mine),
                    "capacity_experts": _median([r["capacity_experts"] for r in mine]),
                    "decode_tps": _median([r["decode_tps"] for r in mine]),
                    "reads_per_token": {
                        key: _median([r["reads_per_token"][key] for r in mine])
                        for key in ("measured", "lru", "belady")
                    },
                    "measured_over_lru": _median([r["measured_over_lru"] for r in mine]),
                    "measured_over_belady": _median([r["measured_over_belady"] for r in mine]),
                    "belady_over_lru": _median([r["belady_over_lru"] for r in mine]),
                    "disk_probe_depth": _one({r.get("disk_probe_depth") for r in mine}),
                    "disk_fraction": _median([r["disk_fraction"] for r in mine]),
                    "capacity_miss_share_lru": _median(
                        [
                            _ratio(
                                r["predicted"]["policies"]["lru"]["decode_capacity_misses"],
                                r["predicted"]["policies"]["lru"]["decode_misses"],
                            )
                            for r in mine
                        ]
                    ),
                    "roofline_predicted_tps": _median(
                        [(r.get("roofline") or {}).get("predicted_decode_tps") for r in mine]
                    ),
                    "roofline_error": _median([(r.get("roofline") or {}).get("error") for r in mine]),
                    "roofline_page_predicted_tps": _median(
                        [(r.get("roofline_page") or {}).get("predicted_decode_tps") for r in mine]
                    ),
                    "roofline_page_error": _median(
                        [(r.get("roofline_page") or {}).get("error") for r in mine]
                    ),
                    "prefill": {
                        key: _median([r["prefill"][key] for r in mine])
                        for key in ("tps", "read_bytes", "bound_bytes", "read_over_bound", "read_bytes_per_s")
                    }
                    | {
                        "disk_probe_depth": _one({r["prefill"]["disk_probe_depth"] for r in mine}),
                        "disk_fraction": _median([r["prefill"]["disk_fraction"] for r in mine]),
                    },
                }
            )
    return out


def trace_equals_routes(trial: dict[str, Any], trace: Trace | None, models_dir: Path) -> bool | None:
    """Whether a forced trial's trace holds exactly its routes file's ids; None when there is no
    trace, or the routes file beside the model is gone or no longer the one the trial used."""
    routes = trial["routes"]
    path = models_dir / str(routes.get("file"))
    if trace is None:
        return None
    try:
        data = read_bytes(path)
    except ConfigError:  # gone, not a regular file, or over strict_load's size bound
        return None
    if sha256_bytes(data) != routes.get("sha256"):
        return None
    return follows_routes(trace, data, str(path))


def analyze_sweep(
    trials: list[dict[str, Any]],
    traces: dict[str, Path],
    model_path: Path,
    probe_record: TimingRecord | None,
) -> dict[str, Any]:
    """results.json's `sweep` section from the loaded trials, their trace files and the probe."""
    loaded = {name: read_trace(path) for name, path in traces.items()}
    if not loaded:
        return {"error": "no trial left a route trace: nothing to predict from"}
    experts = model_experts(model_path, next(iter(loaded.values())))
    probe = probe_summary(probe_record) if probe_record is not None and probe_record.to_json() else None
    bandwidths = probe_bandwidths(probe)
    accounting = account_file(model_path)
    rows = []
    for trial in trials:
        trace = loaded.get(trial["dir"])
        row = trial_row(trial, *host_side(trial, trace, experts, accounting), bandwidths)
        if isinstance(trial.get("routes"), dict):
            row["trace_equals_routes"] = trace_equals_routes(trial, trace, model_path.parent)
        rows.append(row)
    add_roofline(rows, probe["expert_qd1_bytes_per_s"] if probe else None)
    add_roofline(rows, probe["page_qd1_bytes_per_s"] if probe else None, "roofline_page")
    phase_checks = [r["phase_sum_over_cgroup"] for r in rows if "phase_sum_over_cgroup" in r]
    return {
        "model": experts.as_dict(),
        "probe": probe,
        "limits": sorted({r["memory_limit"] for r in rows}),
        "policies": list(POLICIES),
        "phase_tolerance": PHASE_TOLERANCE,
        "phase_sums_within_tolerance": bool(phase_checks)
        and all(abs(x - 1) <= PHASE_TOLERANCE for x in phase_checks),
        "trials": rows,
        "not_comparable": [r["trial"] for r in rows if not comparable(r)],
        "summary": summary_rows(rows),
    }
