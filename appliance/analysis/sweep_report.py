"""The terminal summary of a sweep: the numbers its plots show, one row per limit and variant."""

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from appliance.analysis.report import print_outcome
from appliance.runs.memory_points import limit_label
from appliance.runs.run_dir import RunDir

MIB = 1 << 20


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def sweep_tables(sweep: dict[str, Any]) -> list[Table]:
    """Two tables that each fit 100 columns, one row per limit and variant: what was read
    against the predictions, and how fast decoding went against the disk and the roofline.
    Everything else is in results.json's `sweep`."""
    probe = sweep.get("probe") or {}
    bps = probe.get("expert_qd1_bytes_per_s")
    reads = Table(title="sweep reads: medians; decode MiB per token measured / LRU / Belady")
    speed = Table(
        title="sweep speed: medians; disk = decode read bandwidth / probe "
        f"({_num(bps and bps / MIB, '.1f')} MiB/s, expert-size reads, QD1)"
    )
    for column in ("limit", "variant", "n", "capacity", "MiB/token", "meas/LRU", "meas/Belady"):
        reads.add_column(column, no_wrap=True)
    for column in ("limit", "variant", "tok/s", "disk", "roofline (err)", "roofline@page (err)"):
        speed.add_column(column, no_wrap=True)
    for row in sweep.get("summary") or []:
        per = row["reads_per_token"]
        limit = limit_label(row["memory_limit"])
        reads.add_row(
            limit,
            row["variant"],
            str(row["n"]),
            _num(row["capacity_experts"], ".0f"),
            " / ".join(_num(per[k] and per[k] / MIB, ".3f") for k in ("measured", "lru", "belady")),
            _num(row["measured_over_lru"], ".2f"),
            _num(row["measured_over_belady"], ".2f"),
        )
        speed.add_row(
            limit,
            row["variant"],
            _num(row["decode_tps"], ".2f"),
            _num(row["disk_fraction"], ".3f"),
            f"{_num(row['roofline_predicted_tps'], '.2f')} ({_num(row['roofline_error'], '+.0%')})",
            f"{_num(row.get('roofline_page_predicted_tps'), '.2f')} "
            f"({_num(row.get('roofline_page_error'), '+.0%')})",
        )
    cache = sweep.get("expert_cache")
    return [reads, speed] + ([cache_table(cache)] if cache else [])


def cache_table(cache: dict[str, Any]) -> Table:
    """The expert cache's columns (medians per limit and variant): measured decode reads over
    the same policy's replay at the tool's capacity, whether the tool's misses were the
    replay's, reads over demand mmap's, decode over demand prefetch's, the disk fraction at
    queue depth 1 and 8."""
    table = Table(
        title="expert cache: medians; reads over own replay (goal 1.00 +- "
        f"{cache['replay_tolerance']:.2f}), over demand mmap's; decode over demand prefetch's"
    )
    for column in ("limit", "variant", "cap", "meas/replay", "misses", "/mmap", "/prefetch", "QD1", "QD8"):
        table.add_column(column, no_wrap=True)
    for row in cache["summary"]:
        cached = row["capacity_experts"] is not None
        table.add_row(
            limit_label(row["memory_limit"]),
            row["variant"],
            _num(row["capacity_experts"], ".0f"),
            _num(row["measured_over_replay"], ".3f"),
            ("= replay" if row["tool_misses_equal_replay"] else "DIFFER") if cached else "-",
            _num(row["reads_over_demand_mmap"], ".3f"),
            _num(row["decode_over_demand_prefetch"], ".2f"),
            _num(row["disk_fraction_qd1"], ".3f"),
            _num(row["disk_fraction_qd8"], ".3f"),
        )
    return table


def print_sweep(console: Console, sweep: dict[str, Any]) -> None:
    if "error" in sweep:
        console.print(f"[red]sweep analysis: {sweep['error']}[/red]")
        return
    for table in sweep_tables(sweep):
        console.print(table)
    cache = sweep.get("expert_cache")
    if cache and not (cache["traces_identical"] and cache["tool_misses_equal_replay"]):
        console.print(
            "[red]expert cache: "
            + ("" if cache["traces_identical"] else "a trace differs from the baseline's; ")
            + ("" if cache["tool_misses_equal_replay"] else "the tool's misses differ from the replay's")
            + "[/red]"
        )
    if not sweep.get("phase_sums_within_tolerance"):
        console.print(
            "[yellow]phase reads do not all sum to within "
            f"{sweep['phase_tolerance']:.0%} of the cgroup's block reads[/yellow]"
        )
    if sweep.get("not_comparable"):
        console.print(
            "[red]not comparable (measured decode reads below Belady for their own trace: "
            "pages shared with another trial), left out of the figures: "
            f"{', '.join(sweep['not_comparable'])}[/red]"
        )


def print_sweep_outcome(
    console: Console, results: dict[str, Any], run_dir: Path, status: str, plots: list[Path]
) -> None:
    """Byte identity, trials that did not finish, where the run and its pictures are."""
    print_outcome(console, results, run_dir, status, comparisons_scope=", all limits")
    for plot in sorted({*plots, *RunDir(run_dir).plots.glob("sweep_*.png")}):
        console.print(f"plot: {plot}")
