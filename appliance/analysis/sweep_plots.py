"""A sweep's pictures: decode tokens/s, reads per token against LRU and Belady, and the
fraction of the probed disk bandwidth, each against the memory limit, one line per variant."""

from pathlib import Path
from typing import Any

from appliance.analysis.plots import MIB, plt, save_png

SWEEP_PLOTS = ("sweep_decode_tps.png", "sweep_reads_per_token.png", "sweep_disk_fraction.png")


def _series(summary: list[dict[str, Any]], variant: str, value: Any) -> tuple[list[float], list[float]]:
    points = [
        (row["memory_limit"] / MIB, value(row))
        for row in summary
        if row["variant"] == variant and value(row) is not None
    ]
    return [p[0] for p in points], [p[1] for p in points]


def _finish(fig: Any, ax: Any, path: Path, ylabel: str, title: str, legend_size: int | None = None) -> Path:
    """Label a plot against the memory limit and save it to path."""
    ax.set_xlabel("memory limit (MiB)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=legend_size)
    save_png(fig, path)
    return path


def write_sweep_plots(sweep: dict[str, Any], plots: Path) -> list[Path]:
    summary = sweep.get("summary") or []
    if not summary:
        return []
    variants = list(dict.fromkeys(row["variant"] for row in summary))
    written = []

    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in variants:
        ax.plot(*_series(summary, variant, lambda r: r["decode_tps"]), marker="o", label=variant)
    written.append(
        _finish(
            fig,
            ax,
            plots / SWEEP_PLOTS[0],
            "decode tokens/s (median)",
            "Decode throughput against the memory limit",
        )
    )

    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in variants:
        xs, ys = _series(summary, variant, lambda r: r["reads_per_token"]["measured"])
        ax.plot(xs, [y / MIB for y in ys], marker="o", label=f"{variant} measured")
    for key, style in (("lru", "--"), ("belady", ":")):
        xs, ys = _series(summary, variants[-1], lambda r, key=key: r["reads_per_token"][key])
        ax.plot(
            xs,
            [y / MIB for y in ys],
            linestyle=style,
            color="black",
            label=f"{key} predicted ({variants[-1]}'s capacity)",
        )
    written.append(
        _finish(
            fig,
            ax,
            plots / SWEEP_PLOTS[1],
            "decode reads per token (MiB)",
            "Measured decode reads against LRU and Belady",
            legend_size=7,
        )
    )

    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in variants:
        ax.plot(*_series(summary, variant, lambda r: r["disk_fraction"]), marker="o", label=variant)
    written.append(
        _finish(
            fig,
            ax,
            plots / SWEEP_PLOTS[2],
            "decode read bandwidth / probed bandwidth",
            "Fraction of the disk's cold random-read bandwidth (expert size, QD1)",
        )
    )
    return written
