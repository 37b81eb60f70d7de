"""A route trace's summary (`appliance.trace.info`), as `appliance trace info` prints it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.unit.cli.test_trace import trace_path

__all__ = ["trace_path"]  # a fixture


def test_info_json(trace_path: Path) -> None:
    info = json.loads(run_cli("trace", "info", str(trace_path), "--json", check=True).stdout)
    assert info["n_experts"] == 16 and info["n_expert_used"] == 2
    assert info["steps"] == 2 + 40
    assert info["prompt_tokens"] == 12 and info["decode_tokens"] == 40
    assert info["rows"] == 52 * 3
    assert [row["layer"] for row in info["layers"]] == [0, 1, 2]
    assert all(row["first_touches"] == row["distinct_experts"] for row in info["layers"])
    text = run_cli("trace", "info", str(trace_path), check=True).stdout
    assert "16 per layer, 2 per token" in text
