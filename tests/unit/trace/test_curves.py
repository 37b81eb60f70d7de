"""Hit rate against capacity for every policy (`appliance.trace.curves`), as `appliance
trace curves` writes it: the JSON and its plots."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.unit.cli.test_trace import trace_path

__all__ = ["trace_path"]  # a fixture


def test_curves_writes_json_and_plots(tmp_path: Path, trace_path: Path) -> None:
    out = tmp_path / "curves"
    run_cli(
        "trace",
        "curves",
        str(trace_path),
        "--out",
        str(out),
        "--policy",
        "lru,belady,fifo",
        "--capacity",
        "2,4,8,16",
        check=True,
    )
    report = json.loads((out / "curves.json").read_text())
    assert report["capacities"] == [2, 4, 8, 16]
    lru, belady = report["policies"]["lru"]["hit_rate"], report["policies"]["belady"]["hit_rate"]
    assert lru == sorted(lru) and all(b >= r for b, r in zip(belady, lru, strict=True))
    assert len(report["policies"]["fifo"]["layer_hit_rate"]) == 3
    for name in ("curves.png", "heatmap-lru.png", "heatmap-belady.png", "heatmap-fifo.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
