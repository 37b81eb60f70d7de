"""Measurements that cannot be true: a trial whose measured decode reads fall below what
Belady's (optimal, offline) cache must read for its own route trace at its own capacity.

A cold trial in its own cgroup, on its own page cache, reads every expert miss from the
device, and no policy misses less than Belady. The part of Belady's decode reads that is
certain is its capacity misses: experts the trace had used before and that no cache of that
capacity could keep (first touches may legitimately arrive earlier, through readahead during
load and prefill, or a baseline that reads the whole model at load). Fewer decode bytes than
that mean the pages came from somewhere else: another trial running at the same time on the
same page cache (two cluster nodes on one host), or a cache that was not cold. Such a trial is
flagged `comparable: false` and kept out of the sweep's medians and of evidence comparisons.

With experts of mixed sizes (a byte budget, `appliance.analysis.capacity.budget_for`) the
furthest-next-use replay is no longer optimal, so the floor is the prediction's
`belady_bound`: the count Belady at `budget // smallest expert`, each miss at the smallest
expert's bytes (docs/sweeps.md); with one size it is Belady's own.

Tolerance (page rounding): the kernel reads whole 4 KiB pages and an expert's tensor rarely
starts or ends on a page boundary, so a page at each end of a missed expert may already be
resident from its neighbour. Measured decode reads may therefore fall below Belady's
capacity-miss bytes by up to two pages per such miss before the trial is flagged.
"""

from typing import Any

from appliance.core.units import PAGE_BYTES

PAGES_PER_MISS = 2  # the partial first and last page of each missed expert


def tolerance_bytes(belady_misses: int) -> int:
    """How far below Belady's bytes page rounding alone can bring measured reads."""
    return PAGES_PER_MISS * PAGE_BYTES * max(0, belady_misses)


def contamination(measured: int | None, belady_bytes: int, belady_misses: int) -> dict[str, Any]:
    """The flag for one trial: comparable, and the figures and reason when it is not.
    belady_bytes and belady_misses: Belady's decode capacity misses (bytes, count)."""
    if measured is None:
        return {"comparable": True, "checked": False}
    floor = belady_bytes - tolerance_bytes(belady_misses)
    if measured >= floor:
        return {"comparable": True, "checked": True, "belady_floor_bytes": floor}
    return {
        "comparable": False,
        "checked": True,
        "belady_floor_bytes": floor,
        "reason": (
            f"measured decode reads {measured} B are below the {belady_bytes} B Belady must re-read "
            f"for its own trace and capacity (less {tolerance_bytes(belady_misses)} B of page "
            "rounding): its pages came from another trial or a warm cache; not comparable"
        ),
    }


def flag_sweep_row(row: dict[str, Any]) -> None:
    """A sweep trial row (appliance.analysis.sweep_analysis.trial_row) gains `contamination`."""
    predicted = row.get("predicted")
    if not isinstance(predicted, dict):
        return
    belady = predicted["belady_bound"]
    row["contamination"] = contamination(
        row.get("measured_decode_read_bytes"),
        belady["decode_capacity_read_bytes"],
        belady["decode_capacity_misses"],
    )


def comparable(row: dict[str, Any]) -> bool:
    """Whether a flagged row (sweep trial or paging row) may enter medians and comparisons."""
    return bool((row.get("contamination") or {}).get("comparable", True))
