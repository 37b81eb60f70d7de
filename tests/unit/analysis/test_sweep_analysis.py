"""A sweep's predictions: capacity, replayed decode reads, phases, the probe, the roofline."""

from pathlib import Path
from typing import Any

import pytest

from appliance.analysis.capacity import ModelExperts
from appliance.analysis.sweep_analysis import (
    _ratio,
    add_roofline,
    analyze_sweep,
    host_side,
    phase_reads,
    predicted_budget_reads,
    predicted_reads,
    probe_summary,
    summary_rows,
    trial_row,
)
from appliance.planner.accounting import account_file
from appliance.runs.timing import TimingRecord
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.models import tiny_model
from tests.unit.runs.independent_traces import (
    hand_trace,
    reference_budget_decode_reads,
    reference_decode_reads,
)

EXPERT = 1_000_000
EXPERTS = ModelExperts(
    file_bytes=4 * 32 * EXPERT + 5_000_000,
    expert_bytes={layer: EXPERT for layer in range(4)},
    n_experts=32,
    k=4,
)


def _io(load: int, prefill: int, decode: int) -> dict[str, Any]:
    return {
        "load_end": {"read_bytes": load, "majflt": 10},
        "prefill_end": {"read_bytes": prefill, "majflt": 15},
        "decode_end": {"read_bytes": decode, "majflt": 40},
    }


def test_phase_reads_are_differences_of_the_cumulative_counters() -> None:
    phases = phase_reads(TimingRecord.from_json({"io": _io(100, 350, 1350)}, "t"))
    assert phases == {
        "load": 100,
        "prefill": 250,
        "decode": 1000,
        "total": 1350,
        "major_faults_load": 10,
        "major_faults_prefill": 5,
        "major_faults_decode": 25,
    }
    assert phase_reads(TimingRecord()) is None
    assert (
        phase_reads(TimingRecord.from_json({"io": _io(-1, -1, -1)}, "t")) is None
    )  # /proc/self/io was unreadable


def test_replayed_decode_reads_respect_the_bounds() -> None:
    trace = synth_trace(TraceSynthSpec(n_layers=4, n_experts=32, k=4, n_decode=96, seed=3))
    small = predicted_reads(trace, 24, EXPERTS)
    lru, belady = small["policies"]["lru"], small["policies"]["belady"]
    assert belady["decode_misses"] <= lru["decode_misses"]
    for row in small["policies"].values():
        assert row["decode_misses"] >= small["compulsory_decode_misses"]
        assert row["decode_misses"] - row["decode_capacity_misses"] == small["compulsory_decode_misses"]
        assert row["decode_read_bytes"] == row["decode_misses"] * EXPERT
        assert row["decode_misses"] <= row["misses"]
    assert lru["decode_capacity_misses"] > 0
    everything = predicted_reads(trace, 4 * 32, EXPERTS)
    for row in everything["policies"].values():  # all experts fit: only first touches miss
        assert row["decode_misses"] == everything["compulsory_decode_misses"]
        assert row["decode_capacity_misses"] == 0


def test_probe_bandwidth_uses_device_bytes() -> None:
    record = {
        "file_bytes": 10**9,
        "advice": "POSIX_FADV_RANDOM",
        "measurements": [
            {
                "block_bytes": 1622016,
                "queue_depth": 1,
                "reads": 4,
                "bytes": 6488064,
                "device_read_bytes": 6488064,
                "seconds": 0.5,
            },
            {
                "block_bytes": 1622016,
                "queue_depth": 8,
                "reads": 4,
                "bytes": 6488064,
                "device_read_bytes": 6488064,
                "seconds": 0.25,
            },
            {
                "block_bytes": 4096,
                "queue_depth": 1,
                "reads": 10,
                "bytes": 40960,
                "device_read_bytes": 20480,
                "seconds": 0.01,
            },
            {
                "block_bytes": 4096,
                "queue_depth": 8,
                "reads": 10,
                "bytes": 40960,
                "device_read_bytes": -1,
                "seconds": 0.01,
            },
        ],
    }
    probe = probe_summary(TimingRecord.from_json(record, "timing.json"))
    assert probe["expert_qd1_bytes_per_s"] == pytest.approx(12976128)
    assert probe["expert_qd8_bytes_per_s"] == pytest.approx(25952256)
    assert probe["page_qd1_bytes_per_s"] == pytest.approx(2048000)
    assert probe["measurements"][2]["device_fraction"] == 0.5
    assert probe["page_qd8_bytes_per_s"] == pytest.approx(4096000)  # counter missing: requested


def _trial(name: str, limit: int, decode_s: float, decode_read: int, tokens: int = 96) -> dict[str, Any]:
    return {
        "dir": name,
        "variant": "demand-mmap",
        "repeat": 1,
        "memory_limit": limit,
        "status": "ok",
        "model_device": "8:0",
        "cgroup": {"block_read_bytes": {"8:0": 10_000 + decode_read}},
        "timing": {
            "n_decode_tokens": tokens,
            "decode_s": decode_s,
            "decode_tokens_per_s": tokens / decode_s,
            "residency_at_end": {"anon_bytes": 1_000_000},
            "io": _io(4_000, 10_000, 10_000 + decode_read),
        },
    }


def test_trial_rows_ratios_fraction_and_roofline() -> None:
    trace = synth_trace(TraceSynthSpec(n_layers=4, n_experts=32, k=4, n_decode=96, seed=3))
    small = 5_000_000 + 1_000_000 + 24 * EXPERT
    large = 5_000_000 + 1_000_000 + 200 * EXPERT
    bps = 100 * EXPERT
    rows = [
        trial_row(_trial("001-small", small, 4.0, 500 * EXPERT), trace, EXPERTS, {1: bps}),
        trial_row(_trial("002-large", large, 1.0, 0), trace, EXPERTS, {1: bps}),
    ]
    add_roofline(rows, bps)
    low, high = rows
    assert low["capacity_experts"] == 24 and high["capacity_experts"] == 200
    assert low["phase_sum_over_cgroup"] == 1.0
    lru = low["predicted"]["policies"]["lru"]["decode_read_bytes"]
    assert low["measured_over_lru"] == pytest.approx(500 * EXPERT / lru)
    assert low["disk_fraction"] == pytest.approx(500 * EXPERT / 4.0 / bps)
    assert high["roofline"]["compute_s_per_token"] == pytest.approx(1.0 / 96)
    predicted = 1 / (1.0 / 96 + lru / 96 / bps)
    assert low["roofline"]["predicted_decode_tps"] == pytest.approx(predicted)
    assert low["roofline"]["error"] == pytest.approx((96 / 4.0) / predicted - 1)
    summary = summary_rows(rows)
    assert [(s["memory_limit"], s["n"]) for s in summary] == [(small, 1), (large, 1)]
    assert summary[0]["belady_over_lru"] <= 1


# --- predictions against numbers worked out without the code under test ---------------------

LAYER_BYTES = {0: EXPERT, 1: 2 * EXPERT, 2: 3 * EXPERT, 3: 5 * EXPERT}  # distinct per layer
HAND = ModelExperts(file_bytes=400 * EXPERT, expert_bytes=LAYER_BYTES, n_experts=32, k=4)


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_decode_reads_of_a_thrashing_cycle_by_hand(policy: str) -> None:
    hand = hand_trace(layers=4, n_experts=32, k=4, decode_steps=8)
    predicted = predicted_reads(hand.trace, hand.thrashing_capacity, HAND)
    per_step = 4 * sum(LAYER_BYTES.values())  # k experts of every layer
    assert predicted["decode_requests"] == 8 * 4 * 4
    assert predicted["compulsory_decode_misses"] == 2 * 4 * 4  # A and B, each layer
    assert predicted["policies"][policy] == {
        "misses": 9 * 4 * 4,  # every request misses, the prompt's too
        "decode_misses": 8 * 4 * 4,
        "decode_capacity_misses": 6 * 4 * 4,
        "decode_read_bytes": 8 * per_step,
        "decode_capacity_read_bytes": 6 * per_step,  # the six steps after A and B's first touch
    }


def test_decode_reads_when_everything_fits_by_hand() -> None:
    hand = hand_trace(layers=4, n_experts=32, k=4, decode_steps=8)
    predicted = predicted_reads(hand.trace, hand.fitting_capacity, HAND)
    for row in predicted["policies"].values():  # A and B read once each, P never in decode
        assert row == {
            "misses": 3 * 4 * 4,
            "decode_misses": 2 * 4 * 4,
            "decode_capacity_misses": 0,
            "decode_read_bytes": 2 * 4 * sum(LAYER_BYTES.values()),
            "decode_capacity_read_bytes": 0,
        }


@pytest.mark.parametrize("capacity", [4, 9, 24, 60])
def test_decode_reads_match_the_plain_python_reference(capacity: int) -> None:
    trace = synth_trace(
        TraceSynthSpec(n_layers=4, n_experts=32, k=4, n_prompt=12, n_ubatch=6, n_decode=40, seed=5)
    )
    predicted = predicted_reads(trace, capacity, HAND)
    _assert_reference(predicted, lambda policy: reference_decode_reads(trace, policy, capacity, LAYER_BYTES))


def _assert_reference(predicted: dict[str, Any], reference_of: Any) -> None:
    """Every policy's decode requests, misses and bytes equal the plain-Python reference's."""
    for policy in ("lru", "fifo", "least-stale", "belady"):
        reference = reference_of(policy)
        row = predicted["policies"][policy]
        assert predicted["decode_requests"] == reference["decode_requests"], policy
        assert row["decode_misses"] == reference["decode_misses"], policy
        assert row["decode_read_bytes"] == reference["decode_read_bytes"], policy


# The hand trace's decode steps cycle through A and B of every layer: 2 x k x (1+2+3+5) MB =
# 88 MB. A budget that leaves less than one expert of a layer beside the other 2L - 1 events
# (88 MB - k x 5 MB + 5 MB at most, for the 5 MB layer) has LRU and FIFO evict all of an
# event's experts before they come back: every decode request misses.
THRASHING_BUDGET = 2 * 4 * sum(LAYER_BYTES.values()) - 4 * 5 * EXPERT  # 68 MB


def test_trial_row_ratios_by_hand() -> None:
    """The row's budget and ratios from the hand trace's known reads, never from the row."""
    hand = hand_trace(layers=4, n_experts=32, k=4, decode_steps=8)
    anon = 1_000_000
    limit = anon + HAND.non_expert_bytes + THRASHING_BUDGET
    measured = 300 * EXPERT
    trial = _trial("001-hand", limit, 4.0, measured, tokens=8)
    row = trial_row(trial, hand.trace, HAND, {1: 50 * EXPERT})
    lru = 8 * 4 * sum(LAYER_BYTES.values())
    assert row["budget_bytes"] == THRASHING_BUDGET
    assert row["capacity_experts"] == THRASHING_BUDGET // (5 * EXPERT)  # 13 of the largest
    assert row["measured_decode_read_bytes"] == measured
    assert row["measured_over_lru"] == pytest.approx(measured / lru)
    assert row["reads_per_token"]["lru"] == pytest.approx(lru / 8)
    assert row["decode_read_bytes_per_s"] == pytest.approx(measured / 4.0)
    assert row["disk_fraction"] == pytest.approx(measured / 4.0 / (50 * EXPERT))


def _with_args(trial: dict[str, Any], variant: str, *args: str) -> dict[str, Any]:
    """The trial as another variant whose recorded engine command ends with `args`."""
    command = ["/bin/sh", "-c", "wrapper", "engine", "llama-moe-trace", "-m", "/models/m.gguf", *args]
    return {**trial, "variant": variant, "container": {"command": command}}


@pytest.mark.parametrize(
    ("args", "depth"),
    [
        ((), 1),  # demand mmap or a paging baseline: one faulting thread
        (("--prefetch-experts",), 8),  # WILLNEED: the kernel reads the routed slices ahead
        (("--expert-cache", "lru", "--expert-cache-capacity", "auto"), 8),  # 8 readers by default
        (("--expert-cache", "lru", "--expert-io-depth", "4"), 8),
        (("--expert-cache", "lru", "--expert-io-depth", "1"), 1),
    ],
)
def test_disk_fraction_is_over_the_probe_at_the_depth_the_variant_reads_at(
    args: tuple[str, ...], depth: int
) -> None:
    """The variant's engine arguments (what trial.json's command ran), never its name, decide
    which probe figure its decode bandwidth is over; the row and the summary say which."""
    hand = hand_trace(layers=4, n_experts=32, k=4, decode_steps=8)
    limit = 1_000_000 + HAND.non_expert_bytes + THRASHING_BUDGET
    measured = 300 * EXPERT
    trial = _with_args(_trial("001-hand", limit, 4.0, measured, tokens=8), "any-name", *args)
    probe = {1: 50 * EXPERT, 8: 200 * EXPERT}
    row = trial_row(trial, hand.trace, HAND, probe)
    assert row["disk_probe_depth"] == depth
    assert row["disk_fraction"] == pytest.approx(measured / 4.0 / probe[depth])
    assert summary_rows([row])[0]["disk_probe_depth"] == depth
    assert trial_row(trial, hand.trace, HAND, {1: 50 * EXPERT})["disk_fraction"] == (
        pytest.approx(measured / 4.0 / (50 * EXPERT)) if depth == 1 else None
    )


def test_a_trace_without_rows_predicts_no_reads() -> None:
    empty = hand_trace(layers=4, n_experts=32, k=4, decode_steps=2).trace
    empty = type(empty)(header=empty.header, rows=empty.rows[:0])
    predicted = predicted_reads(empty, 8, HAND)
    assert predicted["decode_requests"] == 0 and predicted["compulsory_decode_misses"] == 0
    assert all(row == dict.fromkeys(row, 0) for row in predicted["policies"].values())


# --- every field of the sweep's records, worked by hand -------------------------------------


def test_probe_summary_in_full() -> None:
    """Device bytes when the counter was read (0 included), requested bytes when it was not (-1
    or absent); no bandwidth for zero seconds, no fraction for zero bytes; the first row of a
    size and depth is the one picked."""
    measurements = [
        {"block_bytes": 8192, "queue_depth": 1, "bytes": 800, "device_read_bytes": 400, "seconds": 2.0},
        {"block_bytes": 8192, "queue_depth": 1, "bytes": 800, "device_read_bytes": 800, "seconds": 1.0},
        {"block_bytes": 8192, "queue_depth": 8, "bytes": 800, "seconds": 4.0},
        {"block_bytes": 4096, "queue_depth": 1, "bytes": 100, "device_read_bytes": 0, "seconds": 1.0},
        {"block_bytes": 4096, "queue_depth": 8, "bytes": 0, "device_read_bytes": -1, "seconds": 0.0},
    ]
    record = {"file_bytes": 123, "advice": "POSIX_FADV_RANDOM", "measurements": measurements}
    probe = probe_summary(TimingRecord.from_json(record, "timing.json"))
    assert probe == {
        "file_bytes": 123,
        "advice": "POSIX_FADV_RANDOM",
        "measurements": [
            {**measurements[0], "bytes_per_s": 200.0, "device_fraction": 0.5},
            {**measurements[1], "bytes_per_s": 800.0, "device_fraction": 1.0},
            {**measurements[2], "bytes_per_s": 200.0, "device_fraction": 1.0},
            {**measurements[3], "bytes_per_s": 0.0, "device_fraction": 0.0},
            {**measurements[4], "bytes_per_s": None, "device_fraction": None},
        ],
        "expert_qd1_bytes_per_s": 200.0,
        "expert_qd8_bytes_per_s": 200.0,
        "page_qd1_bytes_per_s": 0.0,
        "page_qd8_bytes_per_s": None,
        "reference": "expert_qd1_bytes_per_s",
    }
    assert probe_summary(TimingRecord()) == {
        "file_bytes": None,
        "advice": None,
        "measurements": [],
        "expert_qd1_bytes_per_s": None,
        "expert_qd8_bytes_per_s": None,
        "page_qd1_bytes_per_s": None,
        "page_qd8_bytes_per_s": None,
        "reference": "expert_qd1_bytes_per_s",
    }


def test_probe_reference_skips_page_rows_listed_first() -> None:
    """Expert-size rows are any block size but 4096, wherever the page rows stand."""
    measurements = [
        {"block_bytes": 4096, "queue_depth": 1, "bytes": 100, "seconds": 1.0},
        {"block_bytes": 4096, "queue_depth": 8, "bytes": 300, "seconds": 1.0},
        {"block_bytes": 4097, "queue_depth": 1, "bytes": 500, "seconds": 1.0},
        {"block_bytes": 65536, "queue_depth": 8, "bytes": 700, "seconds": 1.0},
    ]
    probe = probe_summary(TimingRecord.from_json({"measurements": measurements}, "timing.json"))
    assert probe["expert_qd1_bytes_per_s"] == 500.0
    assert probe["expert_qd8_bytes_per_s"] == 700.0
    assert probe["page_qd1_bytes_per_s"] == 100.0
    assert probe["page_qd8_bytes_per_s"] == 300.0


def _phases(measured: int) -> dict[str, int]:
    """_io(4_000, 10_000, 10_000 + measured)'s phases, by hand."""
    return {
        "load": 4_000,
        "prefill": 6_000,
        "decode": measured,
        "total": 10_000 + measured,
        "major_faults_load": 10,
        "major_faults_prefill": 5,
        "major_faults_decode": 25,
    }


def test_trial_row_in_full_by_hand() -> None:
    hand = hand_trace(layers=4, n_experts=32, k=4, decode_steps=8)
    anon, measured, tokens = 1_000_000, 300 * EXPERT, 8
    limit = anon + HAND.non_expert_bytes + THRASHING_BUDGET
    row = trial_row(
        _trial("001-hand", limit, 4.0, measured, tokens=tokens), hand.trace, HAND, {1: 50 * EXPERT}
    )
    lru = 8 * 4 * sum(LAYER_BYTES.values())
    belady = reference_budget_decode_reads(hand.trace, "belady", THRASHING_BUDGET, LAYER_BYTES)[
        "decode_read_bytes"
    ]
    predicted = row.pop("predicted")
    assert predicted["policies"]["lru"]["decode_read_bytes"] == lru
    assert predicted["policies"]["belady"]["decode_read_bytes"] == belady
    assert "comparable" in row.pop(
        "contamination"
    )  # its own tests: tests/unit/analysis/test_contamination.py
    prefill = row.pop("prefill")  # its own tests: tests/unit/analysis/test_prefill.py
    union = 4 * sum(LAYER_BYTES.values())  # the prompt step chose the same 4 experts in each layer
    assert (prefill["read_bytes"], prefill["union_bytes"]) == (6_000, union)
    assert prefill["bound_bytes"] == union + HAND.non_expert_bytes and prefill["disk_probe_depth"] == 1
    assert row == {
        "trial": "001-hand",
        "variant": "demand-mmap",
        "repeat": 1,
        "memory_limit": limit,
        "status": "ok",
        "decode_tokens": tokens,
        "decode_s": 4.0,
        "decode_tps": 2.0,
        "anon_bytes": anon,
        "phase_reads": _phases(measured),
        "cgroup_block_read_bytes": 10_000 + measured,
        "phase_sum_over_cgroup": 1.0,
        "budget_bytes": THRASHING_BUDGET,
        "capacity_experts": THRASHING_BUDGET // (5 * EXPERT),
        "capacity_clamped_to_k": False,
        "measured_decode_read_bytes": measured,
        "reads_per_token": {"measured": measured / tokens, "lru": lru / tokens, "belady": belady / tokens},
        "measured_over_lru": measured / lru,
        "measured_over_belady": measured / belady,
        "belady_over_lru": belady / lru,
        "decode_read_bytes_per_s": measured / 4.0,
        "disk_probe_depth": 1,
        "disk_fraction": measured / 4.0 / (50 * EXPERT),
    }


def test_a_trial_that_cannot_be_predicted_keeps_only_its_measurements() -> None:
    """No trace, no decode tokens or not ok: the measured fields only (none predicted); with
    no cgroup reads there is no phase check either."""
    hand = hand_trace(layers=4, n_experts=32, k=4, decode_steps=8).trace
    trial = _trial("001-x", 10**9, 4.0, 1_000, tokens=8)
    measured_only = {
        "trial": "001-x",
        "variant": "demand-mmap",
        "repeat": 1,
        "memory_limit": 10**9,
        "status": "ok",
        "decode_tokens": 8,
        "decode_s": 4.0,
        "decode_tps": 2.0,
        "anon_bytes": 1_000_000,
        "phase_reads": _phases(1_000),
        "cgroup_block_read_bytes": 11_000,
        "phase_sum_over_cgroup": 1.0,
    }
    assert trial_row(trial, None, HAND, {1: 1.0}) == measured_only
    assert trial_row({**trial, "status": "failed"}, hand, HAND, {1: 1.0}) == {
        **measured_only,
        "status": "failed",
    }
    no_tokens = {**trial, "timing": {**trial["timing"], "n_decode_tokens": 0}}
    assert trial_row(no_tokens, hand, HAND, {1: 1.0}) == {**measured_only, "decode_tokens": 0}
    no_reads = {**trial, "cgroup": {}}
    expected = {k: v for k, v in measured_only.items() if k != "phase_sum_over_cgroup"}
    assert trial_row(no_reads, None, HAND, {1: 1.0}) == {**expected, "cgroup_block_read_bytes": None}


def _summary_input(limit: int, variant: str, x: float, **extra: Any) -> dict[str, Any]:
    return {
        "trial": f"{variant}-{limit}-{x}",
        "memory_limit": limit,
        "variant": variant,
        "capacity_experts": x,
        "decode_tps": 10 * x,
        "reads_per_token": {"measured": x, "lru": 2 * x, "belady": 3 * x},
        "measured_over_lru": x / 2,
        "measured_over_belady": x / 4,
        "belady_over_lru": x / 8,
        "disk_probe_depth": 1,
        "disk_fraction": x / 16,
        "predicted": {"policies": {"lru": {"decode_capacity_misses": x, "decode_misses": 4}}},
        "prefill": _prefill(x),
        **extra,
    }


def _prefill(x: float) -> dict[str, Any]:
    return {
        "tps": 100 * x,
        "read_bytes": 1_000 * x,
        "bound_bytes": 2_000 * x,
        "read_over_bound": 0.5,
        "read_bytes_per_s": 30 * x,
        "disk_probe_depth": 8,
        "disk_fraction": x / 32,
    }


def test_summary_rows_are_medians_per_limit_and_variant_by_hand() -> None:
    rows = [
        _summary_input(200, "b", 1.0, roofline={"predicted_decode_tps": 5.0, "error": 0.5}),
        _summary_input(100, "a", 2.0, roofline={"predicted_decode_tps": 7.0, "error": 0.1}),
        _summary_input(100, "a", 3.0, roofline_page={"predicted_decode_tps": 1.0, "error": -0.5}),
        _summary_input(100, "a", 1000.0, contamination={"comparable": False}),  # left out
        {**_summary_input(100, "b", 1000.0), "reads_per_token": None},  # nothing predicted
        _summary_input(200, "a", 4.0),
    ]
    medians = {
        "n": 2,
        "capacity_experts": 2.5,
        "decode_tps": 25.0,
        "reads_per_token": {"measured": 2.5, "lru": 5.0, "belady": 7.5},
        "measured_over_lru": 1.25,
        "measured_over_belady": 0.625,
        "belady_over_lru": 0.3125,
        "disk_probe_depth": 1,
        "disk_fraction": 0.15625,
        "capacity_miss_share_lru": 0.625,  # (2/4 + 3/4) / 2
        "roofline_predicted_tps": 7.0,
        "roofline_error": 0.1,
        "roofline_page_predicted_tps": 1.0,
        "roofline_page_error": -0.5,
        "prefill": _prefill(2.5),  # every figure here is linear in x: the median of 2 and 3
    }

    def one(limit: int, variant: str, x: float, roofline: tuple[float, float] | None) -> dict[str, Any]:
        return {
            "memory_limit": limit,
            "variant": variant,
            "n": 1,
            "capacity_experts": x,
            "decode_tps": 10 * x,
            "reads_per_token": {"measured": x, "lru": 2 * x, "belady": 3 * x},
            "measured_over_lru": x / 2,
            "measured_over_belady": x / 4,
            "belady_over_lru": x / 8,
            "disk_probe_depth": 1,
            "disk_fraction": x / 16,
            "capacity_miss_share_lru": x / 4,
            "roofline_predicted_tps": roofline[0] if roofline else None,
            "roofline_error": roofline[1] if roofline else None,
            "roofline_page_predicted_tps": None,
            "roofline_page_error": None,
            "prefill": _prefill(x),
        }

    assert summary_rows(rows) == [
        {"memory_limit": 100, "variant": "a", **medians},
        one(200, "b", 1.0, (5.0, 0.5)),  # variants in run order: b came first
        one(200, "a", 4.0, None),
    ]


def test_phase_reads_accept_zero_counters() -> None:
    """0 bytes and 0 faults are readings (a page-cache hit), not missing counters."""
    io = {p: {"read_bytes": 0, "majflt": 0} for p in ("load_end", "prefill_end", "decode_end")}
    assert phase_reads(TimingRecord.from_json({"io": io}, "t")) == dict.fromkeys(
        (
            "load",
            "prefill",
            "decode",
            "total",
            "major_faults_load",
            "major_faults_prefill",
            "major_faults_decode",
        ),
        0,
    )
    io["decode_end"] = {"read_bytes": 5}  # no fault counter: the reads alone
    assert phase_reads(TimingRecord.from_json({"io": io}, "t")) == {
        "load": 0,
        "prefill": 0,
        "decode": 5,
        "total": 5,
    }


def _roofline_input(
    variant: str, limit: int, decode_s: float, measured: int | None, lru: float, tps: float
) -> dict[str, Any]:
    return {
        "variant": variant,
        "memory_limit": limit,
        "decode_s": decode_s,
        "decode_tokens": 10,
        "decode_tps": tps,
        "measured_decode_read_bytes": measured,
        "reads_per_token": {"lru": lru},
    }


def test_roofline_by_hand() -> None:
    """Compute per token: the median over the variant's trials at its largest limit of
    (decode time less its own reads at the probed bandwidth) per token, never below 0; each
    trial's prediction adds its LRU reads per token over the bandwidth (worked by hand)."""
    rows = [
        _roofline_input("v", 100, 2.0, 100, 50.0, 5.0),  # (2 - 100/100) / 10 = 0.1
        _roofline_input("v", 100, 4.0, None, 50.0, 5.0),  # (4 - 0) / 10 = 0.4
        _roofline_input("v", 50, 6.0, 300, 20.0, 1.6),  # not at the largest limit
        _roofline_input("w", 70, 0.5, 100, 0.0, 3.0),  # (0.5 - 1) / 10 clamps to 0; nothing to read
        {**_roofline_input("v", 100, 1.0, 0, 50.0, 9.0), "contamination": {"comparable": False}},
        {**_roofline_input("v", 100, 1.0, 0, 50.0, 9.0), "reads_per_token": None},
        {**_roofline_input("v", 100, 0.0, 0, 50.0, 9.0)},  # no decode time: no roofline
    ]
    add_roofline(rows, 100.0, "roof")
    compute = (0.1 + 0.4) / 2
    top = 1 / (compute + 50 / 100)
    low = 1 / (compute + 20 / 100)
    assert rows[0]["roof"] == {
        "compute_s_per_token": pytest.approx(compute),
        "reference_limit": 100,
        "predicted_decode_tps": pytest.approx(top),
        "error": pytest.approx(5.0 / top - 1),
    }
    assert rows[1]["roof"] == rows[0]["roof"]
    assert rows[2]["roof"] == {
        "compute_s_per_token": pytest.approx(compute),
        "reference_limit": 100,
        "predicted_decode_tps": pytest.approx(low),
        "error": pytest.approx(1.6 / low - 1),
    }
    assert rows[3]["roof"] == {
        "compute_s_per_token": 0.0,
        "reference_limit": 70,
        "predicted_decode_tps": None,
        "error": None,
    }
    assert all("roof" not in r for r in rows[4:])
    unprobed = [_roofline_input("v", 100, 2.0, 100, 50.0, 5.0)]
    add_roofline(unprobed, None)
    add_roofline(unprobed, 0.0)
    assert unprobed == [_roofline_input("v", 100, 2.0, 100, 50.0, 5.0)]


def test_a_sweep_without_route_traces_is_one_error(tmp_path: Path) -> None:
    assert analyze_sweep([], {}, tmp_path / "never-read.gguf", None) == {
        "error": "no trial left a route trace: nothing to predict from"
    }


def test_a_ratio_needs_both_figures_and_a_nonzero_divisor() -> None:
    assert (_ratio(3, 2), _ratio(0, 2)) == (1.5, 0.0)
    assert _ratio(None, 2) is None and _ratio(3, 0) is None and _ratio(3, None) is None


def test_a_trial_without_io_counters_is_predicted_but_not_measured() -> None:
    hand = hand_trace(layers=4, n_experts=32, k=4, decode_steps=8)
    trial = _trial("001-no-io", 10**9, 4.0, 1_000, tokens=8)
    del trial["timing"]["io"]
    row = trial_row(trial, hand.trace, HAND, {1: 50 * EXPERT})
    assert row["phase_reads"] is None and "phase_sum_over_cgroup" not in row
    assert row["measured_decode_read_bytes"] is None
    assert row["reads_per_token"]["measured"] is None
    assert row["measured_over_lru"] is row["measured_over_belady"] is None
    assert row["decode_read_bytes_per_s"] is row["disk_fraction"] is None
    assert row["reads_per_token"]["lru"] == row["predicted"]["policies"]["lru"]["decode_read_bytes"] / 8


# --- a byte budget with experts of two sizes (a Q4_K_M Qwen3-30B-A3B's) ----------------------

Q6K_EXPERT, Q4K_EXPERT = 3_059_712, 2_654_208  # bytes of one expert, Q6_K and Q4_K ffn_down_exps
TWO_SIZES = ModelExperts(file_bytes=10**9, expert_bytes={0: Q6K_EXPERT, 1: Q4K_EXPERT}, n_experts=8, k=2)


def test_a_limit_is_a_byte_budget_each_layer_s_experts_at_their_own_size() -> None:
    """Decode cycles A and B of both layers: 2 x k x (Q6_K + Q4_K) = 22,855,680 B, which the
    budget holds exactly, so LRU misses only first touches; `budget // largest expert` would
    have been 7 experts, fewer than the cycle's 8: the second cycle would miss one expert of
    each event (the one LRU evicted while the event before it was admitted)."""
    hand = hand_trace(layers=2, n_experts=8, k=2, decode_steps=4)
    cycle = 2 * 2 * (Q6K_EXPERT + Q4K_EXPERT)
    anon = 1_000_000
    limit = anon + TWO_SIZES.non_expert_bytes + cycle
    row = trial_row(_trial("001-two", limit, 4.0, cycle, tokens=4), hand.trace, TWO_SIZES, {})
    assert (row["budget_bytes"], row["capacity_experts"]) == (cycle, 7)
    lru = row["predicted"]["policies"]["lru"]
    assert lru["decode_misses"] == 8 and lru["decode_capacity_misses"] == 0
    assert lru["decode_read_bytes"] == cycle  # A and B of each layer read once, at their sizes
    counted = predicted_reads(hand.trace, 7, TWO_SIZES)["policies"]["lru"]
    assert counted["decode_misses"] == 8 + 4
    assert counted["decode_read_bytes"] == cycle + 2 * (Q6K_EXPERT + Q4K_EXPERT)
    assert row["measured_over_lru"] == 1.0


@pytest.mark.parametrize("budget", [2 * Q6K_EXPERT, 9_000_000, 16_000_000, 30_000_000])
def test_budget_replay_of_two_sizes_matches_the_plain_statement(budget: int) -> None:
    trace = synth_trace(
        TraceSynthSpec(n_layers=2, n_experts=8, k=2, n_prompt=10, n_ubatch=5, n_decode=40, seed=11)
    )
    predicted = predicted_budget_reads(trace, budget, TWO_SIZES)
    sizes = TWO_SIZES.expert_bytes
    _assert_reference(predicted, lambda policy: reference_budget_decode_reads(trace, policy, budget, sizes))
    # the floor: the count Belady at budget // smallest expert, each miss at the smallest size
    bound = predicted["belady_bound"]
    counted = reference_decode_reads(trace, "belady", budget // Q4K_EXPERT, sizes)
    capacity_misses = counted["decode_misses"] - predicted["compulsory_decode_misses"]
    assert bound == {
        "capacity": budget // Q4K_EXPERT,
        "decode_capacity_misses": capacity_misses,
        "decode_capacity_read_bytes": capacity_misses * Q4K_EXPERT,
    }


def test_with_one_size_the_budget_replay_is_the_count_replay() -> None:
    trace = synth_trace(TraceSynthSpec(n_layers=4, n_experts=32, k=4, n_decode=60, seed=2))
    for capacity in (4, 17, 60):
        budget = capacity * EXPERT + EXPERT - 1  # room for capacity experts, not one more
        by_bytes = predicted_budget_reads(trace, budget, EXPERTS)
        assert by_bytes == predicted_reads(trace, capacity, EXPERTS)
        assert by_bytes["belady_bound"]["capacity"] == capacity


def test_a_trial_with_a_device_reads_only_what_its_placement_leaves_on_the_host() -> None:
    """host_side: the tiny model with -ngl 5 --n-cpu-moe 2 (every layer's dense part and the
    output head on the device, layers 2 and 3's experts too) reads layers 0 and 1's experts and
    the host's non-expert bytes (token embeddings, header, padding); with --cpu-moe every
    layer's experts; with every expert on the device nothing to replay; without a device, or
    without the model's accounting, the trace and experts as they are."""
    acc = account_file(tiny_model("qwen3moe"))
    facts = acc.facts
    experts = ModelExperts(acc.file_size, dict(acc.expert_bytes_by_layer), facts.experts, facts.experts_used)
    trace = synth_trace(TraceSynthSpec(n_layers=4, n_experts=facts.experts, k=facts.experts_used, n_decode=8))

    def on(*placement: str) -> dict[str, Any]:
        command = ["llama-moe-trace", "-m", "/models/m.gguf", *placement]
        return {"engine_backend": "RPC", "container": {"command": command}}

    routed = acc.groups["routed_experts"]
    embeddings = sum(t.nbytes for t in acc.tensors if t.group == "embeddings")
    host_fixed = acc.file_size - sum(t.nbytes for t in acc.tensors) + embeddings  # header, padding, table
    sliced, read = host_side(on("-ngl", "5", "--n-cpu-moe", "2"), trace, experts, acc)
    assert sliced is not None and sliced.moe_layers == [0, 1]
    assert sorted(read.expert_bytes) == [0, 1] and (read.n_experts, read.k) == (experts.n_experts, experts.k)
    assert read.non_expert_bytes == host_fixed
    assert read.file_bytes == host_fixed + routed // 2  # two of four equal layers' experts
    whole, all_experts = host_side(on("-ngl", "5", "--cpu-moe"), trace, experts, acc)
    assert whole is not None and whole.moe_layers == [0, 1, 2, 3]
    assert all_experts.non_expert_bytes == host_fixed and all_experts.file_bytes == host_fixed + routed
    assert host_side(on("-ngl", "99"), trace, experts, acc)[0] is None
    assert host_side(on(), trace, experts, acc) == (trace, experts)
    assert host_side(on("-ngl", "5", "--cpu-moe"), trace, experts, None) == (trace, experts)
    on_the_host = on("-ngl", "5", "--cpu-moe") | {"engine_backend": "CPU"}  # a build without a device
    assert host_side(on_the_host, trace, experts, acc) == (trace, experts)
