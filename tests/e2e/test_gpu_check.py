"""scripts/gpu-check.sh --cpu-only: the half of the GPU machine check that runs without a GPU.

It builds the patched b10229 tree natively (CPU only), runs the tracer twice on a tiny model,
compares the traces and texts and writes its JSON summary, all under the output directory.
ccache is pointed at the appliance cache so that reruns are quick.
"""

import json
import subprocess
from pathlib import Path

import pytest

from appliance.core.digests import tree_digest
from appliance.core.paths import cache_dir
from appliance.engine.lock import load_lock
from appliance.engine.patches import apply_series
from appliance.engine.source import fetch_source
from tests.conftest import REPO
from tests.models import tiny_model

pytestmark = [pytest.mark.slow]


def test_cpu_only_half_builds_runs_compares_and_writes_only_under_out(tmp_path: Path) -> None:
    lock = load_lock()
    tree = apply_series(lock, fetch_source(lock, "b10229"), tmp_path / "llama.cpp").path
    model = tiny_model("qwen3moe")
    before = tree_digest(tree)
    out = tmp_path / "out"
    ccache = cache_dir() / "gpu-check-ccache"
    result = subprocess.run(
        [
            str(REPO / "scripts" / "gpu-check.sh"),
            "--tree",
            str(tree),
            "--model",
            str(model),
            "--out",
            str(out),
            "--cpu-only",
            "--jobs",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "CCACHE_DIR": str(ccache), "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "cpu-only" and summary["ok"] is True
    assert summary["runs"] == ["cpu", "cpu-repeat"] and summary["backends"] == ["CPU", "CPU"]
    assert summary["traces_identical"] is True and summary["texts_identical"] is True
    assert summary["gpu"] is None and summary["gpu_memory_mib"] is None
    assert "CPU_Mapped model buffer size" in result.stdout  # the placement lines
    traces = sorted(p.name for p in (out / "runs").glob("*.moetrace"))
    assert traces == ["cpu-repeat.moetrace", "cpu.moetrace"]
    assert (out / "runs" / "cpu.moetrace").read_bytes()[:8] == b"MOETRACE"
    assert tree_digest(tree) == before  # the tree is only read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama.cpp", "out"]
