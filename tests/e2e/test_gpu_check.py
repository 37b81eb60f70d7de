"""scripts/gpu-check.sh --stand-in: the GPU machine's check tried here first, on llama.cpp's RPC
device (a ggml-rpc-server the script starts on 127.0.0.1 and stops).

It builds the patched b10229 tree natively with the RPC backend, runs every check of the GPU
run on the stand-in (placement against a CPU-only run, traced against --no-trace, a 40+ token
prompt's prefetch with the first layer's experts on the host, op-offload on and off) and writes
its JSON summary, all under the output directory. ccache is pointed at the appliance cache so
that reruns are quick.
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


def test_stand_in_runs_every_check_on_the_rpc_device_and_writes_only_under_out(tmp_path: Path) -> None:
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
            "--stand-in",
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
    assert summary["mode"] == "stand-in" and summary["ok"] is True
    assert summary["runs"] == ["device", "cpu"] and summary["backends"] == ["RPC", "CPU"]
    assert summary["traces_identical"] is True and summary["texts_identical"] is True
    assert summary["placed_on_gpu"] is True and summary["gpu"] is None and summary["gpu_memory_mib"] is None
    assert "RPC0[127.0.0.1:" in result.stdout  # the placement lines name the device
    checks = summary["checks"]
    assert checks["placement"]["device"] == "RPC0"
    assert checks["placement"]["placement"]["layers_offloaded"] >= 1
    assert checks["tracing"]["texts_traced_vs_no_trace"] is True
    fusion = (checks["tracing"]["router_fusion_traced"], checks["tracing"]["router_fusion_no_trace"])
    assert fusion == ("server-backend", "not-cut")  # on CUDA: prevented, not-cut
    assert "texts_fused_vs_unfused_no_trace" not in checks["tracing"]  # CUDA's alone
    prefetch, offload = checks["prefetch"], checks["op_offload"]
    assert prefetch["n_prompt_tokens"] >= 40  # a batch llama.cpp would offload (32+)
    assert prefetch["prefetch_bytes"] > 0 and prefetch["prefetch_calls"] > 0
    # RPC has no offload_op: the same host experts are advised with op-offload on or off
    assert prefetch["prefetch_bytes_without_op_offload"] == prefetch["prefetch_bytes"]
    assert offload["op_offload"] == [True, False] and offload["texts_identical"] is True
    # each partial run starts with the model out of the page cache: the prompt reads host experts
    assert all(isinstance(b, int) and b > 0 for b in offload["prompt_read_bytes"])
    assert "driver" not in checks
    assert not (out / "runs" / "rpc-server.log").read_text().count("error")
    assert tree_digest(tree) == before  # the tree is only read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama.cpp", "out"]
