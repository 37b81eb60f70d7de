"""The sweep's expert-cache section, on a trace replayed by hand (tests/unit/runs/independent_traces.py).

The hand trace has 2 MoE layers, k = 2 and 10 decode steps alternating between two disjoint
expert sets: 40 decode requests over 8 objects. At capacity 6 (the thrashing capacity,
2·L·k − k) LRU misses on every one of them: 40 misses, 40 MiB at 1 MiB per expert. At
capacity 12 everything fits and only the 8 first touches of decode miss: 8 MiB. Every figure
below is worked out from those two facts and the timings given, not from the code under test.
"""

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from appliance.analysis.cache_analysis import sweep_section
from appliance.analysis.capacity import ModelExperts
from appliance.analysis.sweep_analysis import predicted_reads
from appliance.analysis.sweep_report import print_sweep
from appliance.trace.format import write_trace
from tests.unit.runs.independent_traces import hand_trace

MIB = 1 << 20
LIMIT = 100 * MIB
TOKENS = 10
HAND = hand_trace(layers=2, n_experts=8, k=2, decode_steps=TOKENS)
OTHER = hand_trace(layers=2, n_experts=8, k=2, decode_steps=TOKENS + 2)  # a trace that differs
EXPERTS = ModelExperts(file_bytes=2 * 8 * MIB + 3 * MIB, expert_bytes={0: MIB, 1: MIB}, n_experts=8, k=2)
PROBE = {"expert_qd1_bytes_per_s": 100.0 * MIB, "expert_qd8_bytes_per_s": 400.0 * MIB}


def timing(decode_mib: float, tps: float, cache: dict[str, Any] | None = None) -> dict[str, Any]:
    prefill_end = 5 * MIB
    io_points = {
        "load_end": MIB,
        "prefill_end": prefill_end,
        "decode_end": prefill_end + int(decode_mib * MIB),
    }
    return {
        "n_decode_tokens": TOKENS,
        "decode_s": TOKENS / tps,
        "decode_tokens_per_s": tps,
        "io": {point: {"read_bytes": value, "majflt": 0} for point, value in io_points.items()},
        **({"expert_cache": cache} if cache else {}),
    }


def cache(policy: str, capacity: int, misses: int) -> dict[str, Any]:
    return {
        "policy": policy,
        "capacity": capacity,
        "capacity_clamped_to_k": False,
        "io_depth": 8,
        "decode": {
            "misses": misses,
            "bytes_read": misses * MIB,
            "device_read_bytes": misses * MIB,
            "wait_s": 0.5,
            "bytes_dropped": 0,
        },
    }


def trial(name: str, variant: str, t: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "dir": name,
        "variant": variant,
        "repeat": 1,
        "memory_limit": LIMIT,
        "status": "ok",
        "timing": t,
    } | extra


def section(tmp_path: Path) -> dict[str, Any]:
    trials = [
        trial("001-baseline", "baseline", timing(50, 5.0)),
        trial("002-demand-mmap", "demand-mmap", timing(60, 8.0)),
        trial("003-demand-prefetch", "demand-prefetch", timing(60, 10.0)),
        trial("004-expert-lru", "expert-lru", timing(41, 15.0, cache("lru", 6, 40))),
        trial(
            "005-expert-belady",
            "expert-belady",
            timing(8, 20.0, cache("belady", 12, 7)),
            future={"trial": "002-demand-mmap", "sha256": "0" * 64},
        ),
    ]
    loaded, traces = {}, {}
    for t in trials:
        hand = OTHER if t["variant"] == "demand-prefetch" else HAND
        traces[t["dir"]] = write_trace(tmp_path / f"{t['dir']}.moetrace", hand.trace.header, hand.trace.rows)
        loaded[t["dir"]] = hand.trace
    result = sweep_section(trials, loaded, traces, EXPERTS, PROBE)
    assert result is not None
    return result


def test_each_cache_trial_is_set_beside_its_policys_replay_and_the_demand_trials(tmp_path: Path) -> None:
    result = section(tmp_path)
    by = {r["variant"]: r for r in result["trials"]}
    lru = by["expert-lru"]
    assert (lru["replayed_decode_misses"], lru["tool_decode_misses"]) == (40, 40)
    assert lru["replayed_decode_read_bytes"] == 40 * MIB
    assert lru["tool_misses_equal_replay"] is True
    assert lru["measured_over_replay"] == pytest.approx(41 / 40)
    assert lru["reads_over_demand_mmap"] == pytest.approx(41 / 60)
    assert lru["decode_over_demand_prefetch"] == pytest.approx(15 / 10)
    # 41 MiB in 10/15 s = 61.5 MiB/s, over 100 and 400 MiB/s
    assert lru["disk_fraction_qd1"] == pytest.approx(0.615)
    assert lru["disk_fraction_qd8"] == pytest.approx(0.15375)
    assert lru["cache_wait_s_per_token"] == pytest.approx(0.05)
    belady = by["expert-belady"]
    assert (belady["replayed_decode_misses"], belady["tool_decode_misses"]) == (8, 7)
    assert belady["tool_misses_equal_replay"] is False
    assert belady["measured_over_replay"] == pytest.approx(1.0)
    assert belady["reads_over_demand_mmap"] == pytest.approx(8 / 60)
    assert belady["decode_over_demand_prefetch"] == pytest.approx(2.0)
    assert belady["future_trial"] == "002-demand-mmap"
    assert "policy" not in by["demand-mmap"] and by["demand-mmap"]["reads_over_demand_mmap"] == 1.0
    assert by["baseline"]["reads_over_demand_mmap"] == pytest.approx(50 / 60)


def test_traces_are_compared_byte_for_byte_with_the_baselines(tmp_path: Path) -> None:
    result = section(tmp_path)
    identical = {r["variant"]: r["trace_identical_to_baseline"] for r in result["trials"]}
    assert identical == {
        "baseline": True,
        "demand-mmap": True,
        "demand-prefetch": False,
        "expert-lru": True,
        "expert-belady": True,
    }
    assert result["traces_identical"] is False
    assert result["tool_misses_equal_replay"] is False  # belady's 7 against the replay's 8


def test_the_goals_at_the_smallest_limit(tmp_path: Path) -> None:
    goals = section(tmp_path)["goals"]
    assert goals["memory_limit"] == LIMIT
    assert goals["lru_measured_over_replay"] == {"value": pytest.approx(1.025), "met": True}
    assert goals["belady_reads_over_demand_mmap"] == {"value": pytest.approx(8 / 60), "met": True}
    assert goals["best_policy"] == "expert-belady"  # 20 tok/s against lru's 15
    assert goals["best_decode_over_demand_prefetch"] == {"value": pytest.approx(2.0), "met": True}
    # 8 MiB in 0.5 s = 16 MiB/s, 0.04 of the probe's 400 MiB/s at queue depth 8
    assert goals["best_bandwidth_over_probe_qd8"] == {"value": pytest.approx(0.04), "met": False}


def test_a_sweep_without_cache_trials_has_no_section(tmp_path: Path) -> None:
    plain = [trial("001-baseline", "baseline", timing(50, 5.0))]
    path = write_trace(tmp_path / "t.moetrace", HAND.trace.header, HAND.trace.rows)
    assert sweep_section(plain, {"001-baseline": HAND.trace}, {"001-baseline": path}, EXPERTS, PROBE) is None


def test_the_printed_cache_table_shows_the_columns_within_100_columns(tmp_path: Path) -> None:
    out = io.StringIO()
    sweep = {"expert_cache": section(tmp_path), "summary": [], "phase_sums_within_tolerance": True}
    print_sweep(Console(file=out, width=100, color_system=None), sweep)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 100
    lru = next(line for line in lines if " expert-lru " in line)
    cells = [cell.strip() for cell in lru.split("│")[1:-1]]
    assert cells == ["100MiB", "expert-lru", "6", "1.025", "= replay", "0.683", "1.50", "0.615", "0.154"]
    belady = next(line for line in lines if " expert-belady " in line)
    assert " DIFFER " in belady and " 0.133 " in belady and " 2.00 " in belady
    mmap = next(line for line in lines if " demand-mmap " in line)
    # the second cache table: only cache trials; lru waited 0.5 s of its 10/15 s decode (0.75),
    # reading 40 MiB in it: 80 MiB/s over the probe's 100 and 400 MiB/s
    belady_at_6 = predicted_reads(HAND.trace, 6, EXPERTS)["policies"]["belady"]["decode_read_bytes"]
    waits = [line for line in lines if " expert-lru " in line][1]
    cells = [cell.strip() for cell in waits.split("│")[1:-1]]
    assert cells == [
        "100MiB",
        "expert-lru",
        format(41 * MIB / belady_at_6, ".3f"),
        "0",
        "0.75",
        "0.80",
        "0.20",
    ]
    assert sum(" demand-mmap " in line for line in lines) == 1
    assert [cell.strip() for cell in mmap.split("│")[3:6]] == ["-", "-", "-"]
    assert "a trace differs from the baseline's; the tool's misses differ from the replay's" in out.getvalue()
