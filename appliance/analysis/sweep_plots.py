"""A sweep's pictures, each against the memory limit, one line per variant: decode tokens/s
with the roofline prediction, reads per token against LRU and Belady on a log axis with the
model file's size, and the fraction of the probed disk bandwidth."""

from pathlib import Path
from typing import Any

import numpy as np

from appliance.analysis.plots import MIB, plt, save_png

READS_LINTHRESH_MIB = 0.01  # below this many MiB per token the reads axis is linear
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

    fig, ax = decode_figure(summary, variants)
    written.append(
        _finish(
            fig,
            ax,
            plots / SWEEP_PLOTS[0],
            "decode tokens/s (median)",
            "Decode throughput against the memory limit",
        )
    )

    fig, ax = reads_figure(sweep, summary, variants)
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
            "Fraction of the disk's cold random-read bandwidth\n"
            "(expert size, at the depth each variant reads at)",
        )
    )
    return written


def decode_figure(summary: list[dict[str, Any]], variants: list[str]) -> tuple[Any, Any]:
    """Median decode tokens/s per variant, and its roofline prediction dashed in its colour."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in variants:
        line = ax.plot(*_series(summary, variant, lambda r: r["decode_tps"]), marker="o", label=variant)
        xs, ys = _series(summary, variant, lambda r: r.get("roofline_predicted_tps"))
        if xs:
            ax.plot(xs, ys, linestyle="--", color=line[0].get_color(), label=f"{variant} roofline")
    return fig, ax


def reads_figure(
    sweep: dict[str, Any], summary: list[dict[str, Any]], variants: list[str]
) -> tuple[Any, Any]:
    """Measured decode reads per token and the LRU and Belady predictions, on a log axis (linear
    near zero, so predictions of no reads stay visible) with the model file's size drawn."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in variants:
        xs, ys = _series(summary, variant, lambda r: r["reads_per_token"]["measured"])
        ax.plot(xs, [y / MIB for y in ys], marker="o", label=f"{variant} measured")
    for key, style, marker in (("lru", "--", "s"), ("belady", ":", "^")):
        xs, ys = _series(summary, variants[-1], lambda r, key=key: r["reads_per_token"][key])
        ax.plot(
            xs,
            [y / MIB for y in ys],
            linestyle=style,
            marker=marker,
            markerfacecolor="none",
            color="black",
            label=f"{key} predicted ({variants[-1]}'s capacity)",
        )
    model_bytes = (sweep.get("model") or {}).get("file_bytes")
    if model_bytes:
        ax.axhline(model_bytes / MIB, color="grey", linewidth=1, label="model file (one whole read)")
    # a log axis, linear near zero: predictions of zero reads stay visible beside 394 MiB
    ax.set_yscale("symlog", linthresh=READS_LINTHRESH_MIB)
    drawn: list[float] = [float(y) for line in ax.get_lines() for y in np.asarray(line.get_ydata())]
    ax.set_ylim(bottom=0, top=max([*drawn, 1.0]) * 3)
    return fig, ax
