"""The terminal summary of a sweep: the numbers its plots show, one row per limit and variant."""

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from appliance.analysis.run_summary import placement_lines, print_outcome
from appliance.runs.memory_points import limit_label
from appliance.runs.run_dir import RunDir

MIB = 1 << 20


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


READS_COLUMNS = ("limit", "variant", "n", "capacity", "MiB/token", "meas/LRU", "meas/Belady")
SPEED_COLUMNS = ("limit", "variant", "tok/s", "disk@QD", "roofline (err)", "roofline@page (err)")
PREFILL_COLUMNS = ("limit", "variant", "tok/s", "read MiB", "bound MiB", "read/bound", "MiB/s", "disk@QD")


def reads_title() -> str:
    return "sweep reads: medians; decode MiB per token measured / LRU / Belady"


def speed_title(sweep: dict[str, Any]) -> str:
    probe = sweep.get("probe") or {}
    qd1, qd8 = probe.get("expert_qd1_bytes_per_s"), probe.get("expert_qd8_bytes_per_s")
    return (
        "sweep speed: medians; disk@QD = decode read bandwidth / probe's at the queue depth the "
        f"variant reads at (expert-size reads: QD1 {_num(qd1 and qd1 / MIB, '.1f')} MiB/s, "
        f"QD8 {_num(qd8 and qd8 / MIB, '.1f')} MiB/s)"
    )


def prefill_title() -> str:
    return (
        "sweep prompt: medians; bound = the distinct experts the prompt chose + non-expert tensors; "
        "MiB/s while reading; disk@QD = that over the probe's at the depth the prompt read at"
    )


def prefill_rows(sweep: dict[str, Any]) -> list[list[str]]:
    """The cells of the prompt table (PREFILL_COLUMNS), one row per limit and variant."""
    out = []
    for row in sweep.get("summary") or []:
        prefill = row.get("prefill") or {}
        read, bound, bps = (
            prefill.get("read_bytes"),
            prefill.get("bound_bytes"),
            prefill.get("read_bytes_per_s"),
        )
        out.append(
            [
                limit_label(row["memory_limit"]),
                row["variant"],
                _num(prefill.get("tps"), ".2f"),
                _num(read and read / MIB, ".1f"),
                _num(bound and bound / MIB, ".1f"),
                _num(prefill.get("read_over_bound"), ".2f"),
                _num(bps and bps / MIB, ".1f"),
                _fraction_at(prefill) if prefill else "-",
            ]
        )
    return out


def _fraction_at(row: dict[str, Any]) -> str:
    """`0.123@QD8`: the disk fraction and the probe depth it is over."""
    depth = row.get("disk_probe_depth")
    return _num(row.get("disk_fraction"), ".3f") + ("" if depth is None else f"@QD{depth}")


def sweep_rows(sweep: dict[str, Any]) -> tuple[list[list[str]], list[list[str]]]:
    """The cells of the two sweep tables (READS_COLUMNS, SPEED_COLUMNS), one row per limit and
    variant in `summary` order: what the terminal and the HTML report both show."""
    reads: list[list[str]] = []
    speed: list[list[str]] = []
    for row in sweep.get("summary") or []:
        per = row["reads_per_token"]
        limit = limit_label(row["memory_limit"])
        reads.append(
            [
                limit,
                row["variant"],
                str(row["n"]),
                _num(row["capacity_experts"], ".0f"),
                " / ".join(_num(per[k] and per[k] / MIB, ".3f") for k in ("measured", "lru", "belady")),
                _num(row["measured_over_lru"], ".2f"),
                _num(row["measured_over_belady"], ".2f"),
            ]
        )
        speed.append(
            [
                limit,
                row["variant"],
                _num(row["decode_tps"], ".2f"),
                _fraction_at(row),
                f"{_num(row['roofline_predicted_tps'], '.2f')} ({_num(row['roofline_error'], '+.0%')})",
                f"{_num(row.get('roofline_page_predicted_tps'), '.2f')} "
                f"({_num(row.get('roofline_page_error'), '+.0%')})",
            ]
        )
    return reads, speed


def _rich_table(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, no_wrap=True)
    for cells in rows:
        table.add_row(*cells)
    return table


def sweep_tables(sweep: dict[str, Any]) -> list[Table]:
    """Three tables that each fit 100 columns, one row per limit and variant: what was read
    against the predictions, how fast decoding went against the disk and the roofline, and the
    prompt against its own bound; two more for the expert cache's trials when the sweep ran any.
    Everything else is in results.json's `sweep`."""
    reads, speed = sweep_rows(sweep)
    tables = [
        _rich_table(reads_title(), READS_COLUMNS, reads),
        _rich_table(speed_title(sweep), SPEED_COLUMNS, speed),
        _rich_table(prefill_title(), PREFILL_COLUMNS, prefill_rows(sweep)),
    ]
    cache = sweep.get("expert_cache")
    if cache:
        tables.append(_rich_table(cache_title(cache), CACHE_COLUMNS, cache_rows(cache)))
        tables.append(_rich_table(CACHE_WAIT_TITLE, CACHE_WAIT_COLUMNS, cache_wait_rows(cache)))
    return tables


def sweep_notes(sweep: dict[str, Any]) -> list[tuple[str, str]]:
    """(severity `warning` or `error`, text) of what a reader of the sweep tables must know."""
    notes = []
    if not sweep.get("phase_sums_within_tolerance"):
        notes.append(
            (
                "warning",
                "phase reads do not all sum to within "
                f"{sweep['phase_tolerance']:.0%} of the cgroup's block reads",
            )
        )
    if sweep.get("not_comparable"):
        notes.append(
            (
                "error",
                "not comparable (measured decode reads below Belady for their own trace: "
                "pages shared with another trial), left out of the figures: "
                f"{', '.join(sweep['not_comparable'])}",
            )
        )
    cache = sweep.get("expert_cache")
    if cache and not (cache["traces_identical"] and cache["tool_misses_equal_replay"]):
        notes.append(
            (
                "error",
                "expert cache: "
                + ("" if cache["traces_identical"] else "a trace differs from the baseline's; ")
                + ("" if cache["tool_misses_equal_replay"] else "the tool's misses differ from the replay's"),
            )
        )
    return notes


CACHE_COLUMNS = ("limit", "variant", "cap", "meas/replay", "misses", "/mmap", "/prefetch", "QD1", "QD8")


def cache_title(cache: dict[str, Any]) -> str:
    return (
        "expert cache: medians; reads over own replay (goal 1.00 +- "
        f"{cache['replay_tolerance']:.2f}), over demand mmap's; decode over demand prefetch's"
    )


def cache_rows(cache: dict[str, Any]) -> list[list[str]]:
    """The expert cache's cells (CACHE_COLUMNS, medians per limit and variant): measured decode
    reads over the same policy's replay at the tool's capacity, whether the tool's misses were
    the replay's, reads over demand mmap's, decode over demand prefetch's, the disk fraction at
    queue depth 1 and 8."""
    rows = []
    for row in cache["summary"]:
        cached = row["capacity_experts"] is not None
        rows.append(
            [
                limit_label(row["memory_limit"]),
                row["variant"],
                _num(row["capacity_experts"], ".0f"),
                _num(row["measured_over_replay"], ".3f"),
                ("= replay" if row["tool_misses_equal_replay"] else "DIFFER") if cached else "-",
                _num(row["reads_over_demand_mmap"], ".3f"),
                _num(row["decode_over_demand_prefetch"], ".2f"),
                _num(row["disk_fraction_qd1"], ".3f"),
                _num(row["disk_fraction_qd8"], ".3f"),
            ]
        )
    return rows


CACHE_WAIT_COLUMNS = ("limit", "variant", "meas/Belady", "ahead", "wait", "waiting/QD1", "waiting/QD8")
CACHE_WAIT_TITLE = (
    "expert cache reads: medians; decode reads over Belady's replay at the same capacity, layers read "
    "ahead, share of decode time waiting for reads, bandwidth while waiting over the probe's"
)


def cache_wait_rows(cache: dict[str, Any]) -> list[list[str]]:
    """Where the cache trials' decode time went (CACHE_WAIT_COLUMNS, medians per limit and
    variant): reads over Belady's replay at the tool's capacity, --expert-lookahead, the share of
    decode time a step waited for expert reads, and the device bytes read during those waits
    over the waits, as fractions of the probe's expert-size bandwidth at queue depth 1 and 8."""
    return [
        [
            limit_label(row["memory_limit"]),
            row["variant"],
            _num(row["measured_over_belady"], ".3f"),
            _num(row["lookahead"], ".0f"),
            _num(row["exposed_wait_share"], ".2f"),
            _num(row["waiting_fraction_qd1"], ".2f"),
            _num(row["waiting_fraction_qd8"], ".2f"),
        ]
        for row in cache_trial_summary(cache)
    ]


def cache_trial_summary(cache: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows of variants that ran the engine's expert cache (they have a capacity)."""
    return [row for row in cache["summary"] if row["capacity_experts"] is not None]


def print_sweep(console: Console, sweep: dict[str, Any]) -> None:
    if "error" in sweep:
        console.print(f"[red]sweep analysis: {sweep['error']}[/red]")
        return
    for table in sweep_tables(sweep):
        console.print(table)
    for severity, text in sweep_notes(sweep):
        style = "yellow" if severity == "warning" else "red"
        console.print(f"[{style}]{text}[/{style}]")


def print_sweep_outcome(
    console: Console, results: dict[str, Any], run_dir: Path, status: str, plots: list[Path]
) -> None:
    """Where the model lived and the planner's worst error, byte identity, trials that did not
    finish, where the run and its pictures are."""
    for line in placement_lines(results):
        console.print(line)
    print_outcome(console, results, run_dir, status, comparisons_scope=", all limits")
    for plot in sorted({*plots, *RunDir(run_dir).plots.glob("sweep_*.png")}):
        console.print(f"plot: {plot}")
