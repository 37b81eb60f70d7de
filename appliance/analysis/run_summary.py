"""What a run prints after its trials: the statistics table, the ratios, byte identity and
the trials that did not finish. What is printed before the trials: `appliance.runs.preview`."""

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from appliance.runs.run_dir import TIMING_FILE, TRIALS_DIR
from appliance.runs.status import TrialStatus
from appliance.runs.timing import ROUTER_FUSION

MIB = 1 << 20


def _cell(stat: dict[str, Any], scale: float = 1.0, digits: int = 3) -> str:
    if not stat.get("n"):
        return "-"
    flag = " !" if stat["outliers"] else ""
    return (
        f"{stat['median'] / scale:.{digits}f} "
        f"[{stat['min'] / scale:.{digits}f}-{stat['max'] / scale:.{digits}f}]{flag}"
    )


SUMMARY_TITLE = "median [min-max] per variant (! = MAD outlier among the samples)"
SUMMARY_COLUMNS = (
    "variant",
    "ok/trials",
    "wall s",
    "prefill tok/s",
    "decode tok/s",
    "peak MiB",
    "read MiB",
    "read B/token",
)


def summary_rows(results: dict[str, Any]) -> list[list[str]]:
    """The cells of the per-variant table (SUMMARY_COLUMNS), one row per variant: what the
    terminal and the HTML report both show."""
    return [
        [
            name,
            f"{v['counts']['ok']}/{len(v['trials'])}",
            _cell(v["wall_s"]),
            _cell(v["prefill_tps"], digits=2),
            _cell(v["decode_tps"], digits=2),
            _cell(v["peak_bytes"], MIB, 1),
            _cell(v["block_read_bytes"], MIB, 1),
            _cell(v["bytes_read_per_token"], 1, 0),
        ]
        for name, v in results["variants"].items()
    ]


def ratio_lines(results: dict[str, Any]) -> list[str]:
    """One line per pairwise ratio between variants (wall time, decode speed, reads)."""
    lines = []
    for ratio in results["ratios"]:
        parts = [
            f"{metric} {m['median']:.3f}x [{m['min']:.3f}-{m['max']:.3f}]"
            for metric, m in ratio["metrics"].items()
            if metric in ("wall_s", "decode_tps", "block_read_bytes")
        ]
        lines.append(
            f"{ratio['numerator']} / {ratio['denominator']} (pairwise, by round): "
            + (", ".join(parts) or "no complete pairs")
        )
    return lines


def print_summary(
    console: Console, results: dict[str, Any], run_dir: Path, status: str, plots: list[Path]
) -> None:
    table = Table(title=SUMMARY_TITLE)
    for column in SUMMARY_COLUMNS:
        table.add_column(column)
    for cells in summary_rows(results):
        table.add_row(*cells)
    console.print(table)
    for line in ratio_lines(results):
        console.print(line)
    for line in placement_lines(results):
        console.print(line)
    print_outcome(console, results, run_dir, status)
    for plot in plots:
        console.print(f"plot: {plot}")


def print_outcome(
    console: Console, results: dict[str, Any], run_dir: Path, status: str, comparisons_scope: str = ""
) -> None:
    """Byte identity of the generated texts, the trials that did not finish, the run's status."""
    for trial, why in (results.get("timing_unread") or {}).items():
        console.print(
            f"[yellow]trial {trial}: {TIMING_FILE} not read, its figures are left out of the "
            f"tables:[/yellow] {escape(why)}"
        )
    identity = results["byte_identity"]
    if identity["all_identical"]:
        console.print(
            f"[green]generated texts byte-identical at matched length[/green] "
            f"({len(identity['comparisons'])} comparisons{comparisons_scope})"
        )
    else:
        for finding in identity["findings"]:
            console.print(f"[bold red]finding:[/bold red] {finding}")
    for trial, trial_status in results["statuses"].items():
        if trial_status != TrialStatus.OK:
            console.print(f"[red]{trial}: {trial_status}[/red] (logs in {TRIALS_DIR}/{trial}/)")
    console.print(f"run {status}: {run_dir}")


def _sizes(by_name: dict[str, int]) -> str:
    return ", ".join(f"{name} {b / MIB:.1f} MiB" for name, b in sorted(by_name.items())) or "none"


PLACEMENT_COLUMNS = (
    "trial",
    "variant",
    "model per buffer",
    "KV cache",
    "compute",
    "layers offloaded",
    "planner peak MiB",
    "measured peak MiB",
    "peak error %",
    "model pages counted",
)
PLACEMENT_TITLE = "where each trial's model lived (the engine) beside the planner's predicted peak"


def _mib(value: Any) -> str:
    return f"{value / MIB:.1f}" if isinstance(value, int) and not isinstance(value, bool) else "-"


def placement_rows(results: dict[str, Any]) -> list[list[Any]]:
    """One row a trial of results.json `placement`, in PLACEMENT_COLUMNS order."""
    rows = []
    for row in (results.get("placement") or {}).get("trials") or []:
        pct = (row.get("error_pct") or {}).get("peak")
        rows.append(
            [
                row["trial"],
                row["variant"],
                _sizes(row["engine_buffers"]),
                _sizes(row["kv_cache_bytes"]),
                _sizes(row["compute_bytes"]),
                row["layers_offloaded"],
                _mib(row.get("planner_peak_bytes")),
                _mib(row.get("measured_peak_bytes")),
                "-" if pct is None else f"{pct:+.2f}" + (" UNDER" if pct < 0 else ""),
                row.get("planner_peak_pages", "-"),
            ]
        )
    return rows


def planner_verdict_lines(results: dict[str, Any]) -> list[str]:
    """The planner's worst error against the engine over all trials, and each trial whose peak
    it could not predict (results.json `placement`)."""
    placement = results.get("placement") or {}
    lines = []
    worst = placement.get("worst")
    if worst is not None:
        under = " UNDER the measured figure" if worst["pct"] < 0 else ""
        goal = "within" if placement.get("within_goal") else "OUTSIDE"
        undecided = placement.get("undecided") or []
        not_predicted = f" ({len(undecided)} trials' peaks not predicted, below)" if undecided else ""
        lines.append(
            f"planner vs engine: worst {worst['figure']} {worst['pct']:+.2f}% ({worst['trial']}){under}; "
            f"{goal} the goal of {placement['goal_pct']:g}% and never under{not_predicted}, "
            f"over {len(placement.get('trials') or [])} trials"
        )
    why = {row["trial"]: row.get("planner_peak_pages") for row in placement.get("trials") or []}
    for trial in placement.get("undecided") or []:
        lines.append(f"planner vs engine: {trial}: peak not predicted ({why.get(trial) or 'no route trace'})")
    return lines


def placement_lines(results: dict[str, Any]) -> list[str]:
    """Where each variant's model lived (the engine's record, its first trial), then the
    planner's verdict (`planner_verdict_lines`)."""
    placement = results.get("placement")
    if not placement:  # results of an appliance before placement was recorded
        return []
    rows = placement.get("trials") or []
    lines, seen = [], set()
    for row in rows:
        if row["variant"] in seen:
            continue
        seen.add(row["variant"])
        lines.append(
            f"placement {row['variant']}: model {_sizes(row['engine_buffers'])}; KV "
            f"{_sizes(row['kv_cache_bytes'])}; compute {_sizes(row['compute_bytes'])}; "
            f"{row['layers_offloaded']} layers offloaded"
        )
        fusion = row.get("router_fusion")
        if row["layers_offloaded"] and fusion:  # the device's kernels: what tracing left of them
            meaning = ROUTER_FUSION.get(fusion, "unknown to this appliance")
            lines.append(f"router kernels {row['variant']}: {fusion}, {meaning}")
    lines += planner_verdict_lines(results)
    if placement.get("worst") is None and not rows:
        lines.append("placement: the engine recorded none (an engine without patch 0001's placement record)")
    return lines
