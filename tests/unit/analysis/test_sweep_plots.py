"""The sweep's pictures show what they exist for: the reads plot on a log axis with the
measured points, both predictions and the model file; the decode plot with its roofline."""

from typing import Any

from appliance.analysis.plots import MIB, plt
from appliance.analysis.sweep_plots import decode_figure, reads_figure


def _row(limit_mib: float, variant: str, measured: float, lru: float, belady: float) -> dict[str, Any]:
    return {
        "memory_limit": int(limit_mib * MIB),
        "variant": variant,
        "decode_tps": 5.0,
        "roofline_predicted_tps": 6.0,
        "reads_per_token": {"measured": measured, "lru": lru, "belady": belady},
    }


SUMMARY = [
    _row(99.5, "baseline", 394 * MIB, 3 * MIB, 1 * MIB),
    _row(477.6, "baseline", 394 * MIB, 0.0, 0.0),
    _row(99.5, "demand-mmap", 2 * MIB, 3 * MIB, 1 * MIB),
    _row(477.6, "demand-mmap", 0.0, 0.0, 0.0),
]


def test_the_reads_plot_is_logarithmic_and_shows_predictions_and_the_model_size() -> None:
    sweep = {"model": {"file_bytes": 400 * MIB}, "summary": SUMMARY}
    fig, ax = reads_figure(sweep, SUMMARY, ["baseline", "demand-mmap"])
    try:
        assert ax.get_yscale() == "symlog"
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines) == {
            "baseline measured",
            "demand-mmap measured",
            "lru predicted (demand-mmap's capacity)",
            "belady predicted (demand-mmap's capacity)",
            "model file (one whole read)",
        }
        assert list(lines["lru predicted (demand-mmap's capacity)"].get_ydata()) == [3.0, 0.0]
        assert lines["belady predicted (demand-mmap's capacity)"].get_marker() == "^"
        assert list(lines["model file (one whole read)"].get_ydata()) == [400.0, 400.0]
        low, high = ax.get_ylim()
        assert low <= 0.0 and high >= 400.0  # zero predictions and the whole file both in view
    finally:
        plt.close(fig)


def test_the_decode_plot_draws_each_variants_roofline() -> None:
    fig, ax = decode_figure(SUMMARY, ["baseline", "demand-mmap"])
    try:
        labels = [line.get_label() for line in ax.get_lines()]
        assert labels == ["baseline", "baseline roofline", "demand-mmap", "demand-mmap roofline"]
    finally:
        plt.close(fig)
