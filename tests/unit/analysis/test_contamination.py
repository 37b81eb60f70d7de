"""A trial whose measured decode reads fall below what Belady must re-read for its own trace
and capacity (its decode capacity misses, beyond two pages of rounding per miss) is flagged
not comparable and left out of the sweep's medians and of evidence comparisons. Numbers made
by hand."""

from typing import Any

from appliance.analysis.contamination import PAGE_BYTES, comparable, contamination, tolerance_bytes
from appliance.analysis.sweep_analysis import summary_rows, trial_row
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.unit.analysis.test_sweep_analysis import EXPERT, EXPERTS, _trial

MIB = 1 << 20


def test_the_tolerance_is_two_pages_per_belady_miss() -> None:
    assert PAGE_BYTES == 4096
    assert tolerance_bytes(100) == 100 * 2 * 4096
    assert tolerance_bytes(0) == 0


def test_reads_at_or_just_below_belady_within_page_rounding_are_comparable() -> None:
    # Belady: 100 misses of 1 MiB = 100 MiB; floor = 100 MiB - 800 KiB
    belady, misses = 100 * MIB, 100
    assert contamination(belady, belady, misses) == {
        "comparable": True,
        "checked": True,
        "belady_floor_bytes": belady - 819_200,
    }
    assert contamination(belady - 819_200, belady, misses)["comparable"] is True
    assert contamination(3 * belady, belady, misses)["comparable"] is True  # LRU-like: far above


def test_reads_below_belady_beyond_rounding_are_flagged() -> None:
    belady, misses = 100 * MIB, 100
    flag = contamination(belady - 819_201, belady, misses)
    assert flag["comparable"] is False and flag["belady_floor_bytes"] == belady - 819_200
    assert flag["reason"] == (
        f"measured decode reads {belady - 819_201} B are below the {belady} B Belady must re-read for "
        "its own trace and capacity (less 819200 B of page rounding): its pages came from another "
        "trial or a warm cache; not comparable"
    )
    # the cluster case of issue 24: 0.000 MiB per token where Belady predicts 0.290
    assert contamination(0, int(0.290 * MIB) * 96, 30)["comparable"] is False
    assert contamination(None, belady, misses) == {"comparable": True, "checked": False}


def _row(name: str, decode_read: int) -> dict[str, Any]:
    trace = synth_trace(TraceSynthSpec(n_layers=4, n_experts=32, k=4, n_decode=96, seed=3))
    limit = 5_000_000 + 1_000_000 + 24 * EXPERT
    return trial_row(_trial(name, limit, 4.0, decode_read), trace, EXPERTS, {1: 100 * EXPERT})


def test_a_contaminated_sweep_trial_is_flagged_and_left_out_of_the_medians() -> None:
    clean = _row("001-clean", 500 * EXPERT)
    belady = clean["predicted"]["policies"]["belady"]["decode_capacity_read_bytes"]
    assert 0 < belady <= 500 * EXPERT  # the clean trial reads more than the optimum, as it must
    shared = _row("002-shared", 0)
    assert comparable(clean) and clean["contamination"]["checked"]
    assert not comparable(shared)
    assert shared["contamination"]["reason"].startswith(
        f"measured decode reads 0 B are below the {belady} B Belady must re-read"
    )
    summary = summary_rows([clean, shared])
    assert [s["n"] for s in summary] == [1]
    assert summary[0]["reads_per_token"]["measured"] == 500 * EXPERT / 96
