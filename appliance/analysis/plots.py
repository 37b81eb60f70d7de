"""PNG plots of a run: decode tokens/s per variant with spread, memory and reads per trial."""

import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from appliance.core import atomic  # noqa: E402
from appliance.runs.run_dir import RunDir  # noqa: E402
from appliance.runs.status import TrialStatus  # noqa: E402

MIB = 1 << 20


def save_png(fig: Any, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    atomic.write_bytes(path, buffer.getvalue())


def decode_plot(results: dict[str, Any], path: Path) -> bool:
    """Median decode tokens/s per variant, min-max as error bars, samples as dots."""
    names = [n for n, v in results["variants"].items() if v["decode_tps"]["n"]]
    if not names:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for x, name in enumerate(names):
        d = results["variants"][name]["decode_tps"]
        ax.bar(x, d["median"], color="#4c72b0", alpha=0.7)
        ax.errorbar(
            x,
            d["median"],
            yerr=[[d["median"] - d["min"]], [d["max"] - d["median"]]],
            color="black",
            capsize=6,
        )
        ax.scatter([x] * d["n"], d["samples"], color="black", s=12, zorder=3)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("decode tokens/s (median, min-max)")
    ax.set_title("Decode throughput per variant")
    save_png(fig, path)
    return True


def trial_limits(trials: list[dict[str, Any]], memory_limit: int) -> list[int]:
    """The memory limit each trial ran under (trial.json `memory_limit`), in run order;
    memory_limit (the profile's) for a record that has none."""
    return [int(t.get("memory_limit") or memory_limit) for t in trials]


def trial_resources_plot(run_dir: Path, path: Path, memory_limit: int) -> bool:
    """Per trial in run order: cgroup peak memory against the limit that trial ran under (its
    trial.json `memory_limit`; memory_limit for records without one), and bytes read."""
    trials = RunDir(run_dir).load_trials()
    if not trials:
        return False
    labels = [t["dir"] for t in trials]
    peaks = [(t["cgroup"].get("peak_bytes") or 0) / MIB for t in trials]
    reads = [sum((t["cgroup"].get("block_read_bytes") or {}).values()) / MIB for t in trials]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, len(trials) * 0.8), 6), sharex=True)
    colours = ["#c44e52" if t.get("status") != TrialStatus.OK else "#4c72b0" for t in trials]
    top.bar(range(len(trials)), peaks, color=colours)
    top.hlines(
        [limit / MIB for limit in trial_limits(trials, memory_limit)],
        [x - 0.45 for x in range(len(trials))],
        [x + 0.45 for x in range(len(trials))],
        color="black",
        linestyle="--",
        label="memory limit (each trial's)",
    )
    top.set_ylabel("peak memory (MiB)")
    top.legend(loc="lower right")
    bottom.bar(range(len(trials)), reads, color=colours)
    bottom.set_ylabel("block reads (MiB)")
    bottom.set_xticks(range(len(trials)), labels, rotation=45, ha="right", fontsize=8)
    top.set_title("Per trial (red: not ok)")
    fig.tight_layout()
    save_png(fig, path)
    return True


def write_plots(run_dir: Path, results: dict[str, Any], memory_limit: int) -> list[Path]:
    """Writes RUN/plots/*.png; returns the files written (none when there is nothing to plot)."""
    plots = RunDir(run_dir).plots
    written = []
    if decode_plot(results, plots / "decode_tps.png"):
        written.append(plots / "decode_tps.png")
    if trial_resources_plot(run_dir, plots / "trial_resources.png", memory_limit):
        written.append(plots / "trial_resources.png")
    return written
