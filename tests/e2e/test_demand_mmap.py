"""LLAMA_MMAP_DEMAND=1 (patch 0002): a cold model is not read at load time, output is unchanged."""

from pathlib import Path

import pytest

from appliance.host.pagecache import evict
from tests.e2e.conftest import run_tracer
from tests.models import tiny_model

PROMPT = "Hello world, demand paging."


@pytest.mark.engine
def test_demand_mmap_leaves_a_cold_model_unread_at_load(engine_bin: Path, tmp_path: Path) -> None:
    model = tiny_model("qwen3moe", size="400MiB")
    size = model.stat().st_size
    args = ("-n", "8", "--ignore-eos", "--no-repack", "--no-trace")
    resident = {}
    texts = {}
    for mode, env in (("demand", {"LLAMA_MMAP_DEMAND": "1"}), ("default", {"LLAMA_MMAP_DEMAND": ""})):
        evict(model)
        run = run_tracer(engine_bin, model, tmp_path / mode, *args, prompt=PROMPT, env=env)
        assert run.timings["mmap_demand"] == env["LLAMA_MMAP_DEMAND"]
        resident[mode] = run.timings["residency_after_load"]["model_mapped_rss_bytes"] / size
        texts[mode] = run.text
    print(
        f"model mapping resident after load: demand {resident['demand']:.1%}, "
        f"default {resident['default']:.1%} of {size} bytes"
    )
    assert resident["demand"] < 0.20
    assert resident["default"] > 0.80
    assert texts["demand"] == texts["default"] and texts["demand"]
