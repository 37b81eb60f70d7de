"""Trials of the engine's expert cache (patch 0004, `--expert-cache`) against their own replay.

For a trial whose tracer ran an expert cache: the decode reads it measured beside the decode
reads the same policy replays for the same trace at the capacity the tool used (goal: equal,
1.00 +- 0.05), the tool's own decode misses beside the replay's (equal by construction), and,
against the trials of the same limit and repeat without the cache, reads over demand mmap's
and decode tokens/s over demand prefetch's. Bandwidth is compared with the disk probe at queue
depth 1 and 8. The model behind the numbers is in docs/sweeps.md ("The expert cache").
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from appliance.analysis.capacity import model_experts
from appliance.analysis.stats import ratio_or_none as _ratio
from appliance.analysis.sweep_analysis import (
    ModelExperts,
    host_side,
    phase_reads,
    predicted_reads,
    probe_summary,
)
from appliance.core.digests import sha256_file
from appliance.planner.accounting import Accounting, account_file
from appliance.runs.status import TrialStatus
from appliance.runs.timing import TimingRecord, timing_of
from appliance.trace.format import Trace, read_trace

REPLAY_TOLERANCE = 0.05  # measured reads within 5% of the policy's replay
BELADY_OVER_DEMAND_GOAL = 0.65
DECODE_OVER_PREFETCH_GOAL = 1.5
BANDWIDTH_OVER_QD8_GOAL = 0.5
WAITING_BANDWIDTH_OVER_QD8_GOAL = 0.6  # issue 35: reads at the disk's speed while a step waits
EXPOSED_WAIT_GOAL = 0.3  # at most this share of decode time waiting for expert reads
DEMAND_MMAP = "demand-mmap"
DEMAND_PREFETCH = "demand-prefetch"


def cache_row(
    name: str,
    variant: str,
    repeat: int,
    memory_limit: int,
    timing: TimingRecord,
    trace: Trace,
    experts: ModelExperts,
    probe: dict[str, Any] | None,
) -> dict[str, Any]:
    """One trial: decode rate and reads, and for a cache trial its replay at the tool's capacity."""
    tokens = timing.n_decode_tokens or 0
    decode_s = timing.decode_s or 0.0
    phases = phase_reads(timing)
    measured = phases["decode"] if phases is not None else None
    bandwidth = measured / decode_s if measured is not None and decode_s else None
    row: dict[str, Any] = {
        "trial": name,
        "variant": variant,
        "repeat": repeat,
        "memory_limit": memory_limit,
        "decode_tokens": tokens,
        "decode_tps": timing.decode_tokens_per_s,
        "measured_decode_read_bytes": measured,
        "reads_per_token": _ratio(measured, tokens),
        "decode_read_bytes_per_s": bandwidth,
        "disk_fraction_qd1": _ratio(bandwidth, (probe or {}).get("expert_qd1_bytes_per_s")),
        "disk_fraction_qd8": _ratio(bandwidth, (probe or {}).get("expert_qd8_bytes_per_s")),
    }
    cache = timing.expert_cache
    if not cache:
        return row
    replays = predicted_reads(trace, int(cache["capacity"]), experts)["policies"]
    replay = replays[cache["policy"]]
    wait_s = cache["decode"]["wait_s"]
    waited_bandwidth = _ratio(cache["decode"]["device_read_bytes"], wait_s)
    row |= {
        "policy": cache["policy"],
        "capacity_experts": cache["capacity"],
        "capacity_clamped_to_k": cache["capacity_clamped_to_k"],
        "io_depth": cache["io_depth"],
        "tool_decode_misses": cache["decode"]["misses"],
        "replayed_decode_misses": replay["decode_misses"],
        "tool_misses_equal_replay": cache["decode"]["misses"] == replay["decode_misses"],
        "tool_decode_read_bytes": cache["decode"]["bytes_read"],
        "tool_decode_device_read_bytes": cache["decode"]["device_read_bytes"],
        "replayed_decode_read_bytes": replay["decode_read_bytes"],
        "measured_over_replay": _ratio(measured, replay["decode_read_bytes"]),
        "measured_over_belady": _ratio(measured, replays["belady"]["decode_read_bytes"]),
        "lookahead": cache.get("lookahead", 0),
        "decode_ahead_bytes": cache["decode"].get("ahead_bytes", 0),
        "cache_wait_s_per_token": _ratio(wait_s, tokens),
        "exposed_wait_share": _ratio(wait_s, decode_s),
        "waiting_read_bytes_per_s": waited_bandwidth,
        "waiting_fraction_qd1": _ratio(waited_bandwidth, (probe or {}).get("expert_qd1_bytes_per_s")),
        "waiting_fraction_qd8": _ratio(waited_bandwidth, (probe or {}).get("expert_qd8_bytes_per_s")),
        "cache_dropped_bytes": cache["decode"]["bytes_dropped"],
    }
    return row


def compare_with_baselines(rows: list[dict[str, Any]]) -> None:
    """Each trial's reads over demand mmap's and decode over demand prefetch's (same limit and
    repeat), in place."""
    by_key = {(r["memory_limit"], r["repeat"], r["variant"]): r for r in rows}
    for r in rows:
        mmap = by_key.get((r["memory_limit"], r["repeat"], DEMAND_MMAP))
        prefetch = by_key.get((r["memory_limit"], r["repeat"], DEMAND_PREFETCH))
        r["reads_over_demand_mmap"] = _ratio(
            r["measured_decode_read_bytes"], mmap["measured_decode_read_bytes"] if mmap else None
        )
        r["decode_over_demand_prefetch"] = _ratio(
            r["decode_tps"], prefetch["decode_tps"] if prefetch else None
        )


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


SUMMARY_KEYS = (
    "decode_tps",
    "reads_per_token",
    "measured_over_replay",
    "reads_over_demand_mmap",
    "decode_over_demand_prefetch",
    "disk_fraction_qd1",
    "disk_fraction_qd8",
    "capacity_experts",
    "cache_wait_s_per_token",
    "measured_over_belady",
    "exposed_wait_share",
    "waiting_fraction_qd1",
    "waiting_fraction_qd8",
    "lookahead",
)


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (limit, variant), limits ascending, variants in run order."""
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    out = []
    for limit in sorted({r["memory_limit"] for r in rows}):
        for variant in variants:
            mine = [r for r in rows if r["memory_limit"] == limit and r["variant"] == variant]
            if mine:
                out.append(
                    {"memory_limit": limit, "variant": variant, "n": len(mine)}
                    | {key: _median([r.get(key) for r in mine]) for key in SUMMARY_KEYS}
                    | {"tool_misses_equal_replay": all(r.get("tool_misses_equal_replay", True) for r in mine)}
                )
    return out


def goals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The expert cache's goals at the smallest limit, each with its figure and whether it was met."""
    if not rows:
        return {}
    smallest = min(r["memory_limit"] for r in rows)
    at = {r["variant"]: r for r in summary(rows) if r["memory_limit"] == smallest}

    def get(variant: str, key: str) -> float | None:
        value = at.get(variant, {}).get(key)
        return None if value is None else float(value)

    lru = get("expert-lru", "measured_over_replay")
    belady = get("expert-belady", "reads_over_demand_mmap")
    # reading ahead from the future (--expert-lookahead) is an oracle bound, not a policy to pick
    cached = [v for v in at if v.startswith("expert-") and not get(v, "lookahead")]
    best = max(cached, key=lambda v: get(v, "decode_tps") or 0.0, default=None)
    best_speedup = get(best, "decode_over_demand_prefetch") if best else None
    best_qd8 = get(best, "disk_fraction_qd8") if best else None
    best_wait = get(best, "exposed_wait_share") if best else None
    best_waiting_qd8 = get(best, "waiting_fraction_qd8") if best else None
    return {
        "memory_limit": smallest,
        "lru_measured_over_replay": {
            "value": lru,
            "met": lru is not None and abs(lru - 1) <= REPLAY_TOLERANCE,
        },
        "belady_reads_over_demand_mmap": {
            "value": belady,
            "met": belady is not None and belady <= BELADY_OVER_DEMAND_GOAL,
        },
        "best_policy": best,
        "best_decode_over_demand_prefetch": {
            "value": best_speedup,
            "met": best_speedup is not None and best_speedup >= DECODE_OVER_PREFETCH_GOAL,
        },
        "best_bandwidth_over_probe_qd8": {
            "value": best_qd8,
            "met": best_qd8 is not None and best_qd8 >= BANDWIDTH_OVER_QD8_GOAL,
        },
        "best_waiting_bandwidth_over_probe_qd8": {
            "value": best_waiting_qd8,
            "met": best_waiting_qd8 is not None and best_waiting_qd8 >= WAITING_BANDWIDTH_OVER_QD8_GOAL,
        },
        "best_exposed_wait_share": {
            "value": best_wait,
            "met": best_wait is not None and best_wait <= EXPOSED_WAIT_GOAL,
        },
    }


def is_cache_trial(trial: dict[str, Any]) -> bool:
    """The tracer ran an expert cache: its timing.json has `expert_cache`."""
    return bool(timing_of(trial).expert_cache)


def sweep_section(
    trials: list[dict[str, Any]],
    loaded: dict[str, Trace],
    traces: dict[str, Path],
    experts: ModelExperts,
    probe: dict[str, Any] | None,
    accounting: Accounting | None = None,
) -> dict[str, Any] | None:
    """results.json `sweep.expert_cache` for a sweep with cache trials (None without): a row per
    finished traced trial (`cache_row`, against demand mmap and prefetch of its limit and
    repeat), each trace's byte identity with the first variant's (the baseline's) trace of the
    same limit and repeat, the medians per limit and variant, and the goals. With the model's
    `accounting` a trial with a device is replayed on its host layers only (`host_side`)."""
    if not any(is_cache_trial(t) for t in trials):
        return None
    done = [t for t in trials if t.get("status") == TrialStatus.OK and t["dir"] in loaded]
    digests = {t["dir"]: sha256_file(traces[t["dir"]]) for t in done}
    baseline = trials[0]["variant"] if trials else None
    reference = {
        (t["memory_limit"], t["repeat"]): digests[t["dir"]] for t in done if t["variant"] == baseline
    }
    rows = []
    for t in done:
        trace, read = host_side(t, loaded[t["dir"]], experts, accounting)
        if trace is None:  # every layer's experts on the device: nothing read to replay
            continue
        row = cache_row(
            t["dir"], t["variant"], t["repeat"], int(t["memory_limit"]), timing_of(t), trace, read, probe
        )
        expected = reference.get((t["memory_limit"], t["repeat"]))
        row["trace_identical_to_baseline"] = None if expected is None else digests[t["dir"]] == expected
        if t.get("future"):
            row["future_trial"] = t["future"]["trial"]
        rows.append(row)
    compare_with_baselines(rows)
    return {
        "baseline": baseline,
        "replay_tolerance": REPLAY_TOLERANCE,
        "trials": rows,
        "summary": summary(rows),
        "goals": goals(rows),
        "traces_identical": all(r["trace_identical_to_baseline"] is not False for r in rows),
        "tool_misses_equal_replay": all(r.get("tool_misses_equal_replay", True) for r in rows),
    }


def sweep_cache_analysis(
    trials: list[dict[str, Any]],
    traces: dict[str, Path],
    model_path: Path,
    probe_record: TimingRecord | None,
) -> dict[str, Any] | None:
    """`sweep_section` from a run directory's loaded trials, trace files, model and probe record."""
    if not any(is_cache_trial(t) for t in trials):
        return None
    loaded = {name: read_trace(path) for name, path in traces.items()}
    experts = model_experts(model_path, next(iter(loaded.values())))
    probe = probe_summary(probe_record) if probe_record is not None and probe_record.to_json() else None
    return sweep_section(trials, loaded, traces, experts, probe, account_file(model_path))
