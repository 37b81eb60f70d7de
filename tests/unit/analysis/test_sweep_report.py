"""The sweep's tables are readable in a 100-column log: no cell wraps, no line is longer."""

import io

from rich.console import Console

from appliance.analysis.sweep_report import print_sweep

MIB = 1 << 20


def _row(limit: int, variant: str) -> dict[str, object]:
    return {
        "memory_limit": limit,
        "variant": variant,
        "n": 1,
        "capacity_experts": 1234,
        "decode_tps": 12.345,
        "reads_per_token": {"measured": 394.123 * MIB, "lru": 0.0, "belady": 0.0},
        "measured_over_lru": None,
        "measured_over_belady": None,
        "disk_fraction": 0.123,
        "roofline_predicted_tps": 123.45,
        "roofline_error": -0.95,
        "roofline_page_predicted_tps": 12.34,
        "roofline_page_error": 0.05,
        "prefill": {
            "tps": 1234.567,
            "read_bytes": 14_400 * MIB,
            "bound_bytes": 15_000 * MIB,
            "read_over_bound": 0.96,
            "read_bytes_per_s": 1_234.5 * MIB,
            "disk_probe_depth": 8,
            "disk_fraction": 1.02,
        },
    }


def test_the_sweep_tables_fit_100_columns_without_wrapping() -> None:
    limits = (104_333_312, 208_670_720, 500_805_632)
    variants = ("baseline", "demand-mmap", "demand-prefetch")
    sweep = {
        "probe": {"expert_qd1_bytes_per_s": 66.5 * MIB},
        "summary": [_row(limit, variant) for limit in limits for variant in variants],
        "phase_sums_within_tolerance": True,
        "phase_tolerance": 0.1,
    }
    out = io.StringIO()
    print_sweep(Console(file=out, width=100, color_system=None), sweep)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 100
    # each table: one line per row (nothing wrapped), and every row's limit and variant shown
    for variant in variants:
        assert sum(1 for line in lines if f" {variant} " in line) == 3 * len(limits)
    assert sum(1 for line in lines if "99.5MiB" in line) == 3 * len(variants)
    assert "394.123 / 0.000 / 0.000" in out.getvalue()
    # the prompt's table: reads and bound in MiB, their ratio, bandwidth, fraction at its depth
    assert sum(1 for line in lines if "14400.0" in line and "15000.0" in line and "1.020@QD8" in line) == 9
