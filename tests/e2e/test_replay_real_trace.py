"""The replay engine against libCacheSim on real route traces written by llama-moe-trace."""

from pathlib import Path

import pytest

from appliance.trace.format import read_trace
from tests.e2e.conftest import run_tracer
from tests.models import tiny_model
from tests.unit.trace.test_replay_libcachesim import crosscheck_trace


@pytest.mark.engine
@pytest.mark.parametrize("arch", ["qwen3moe", "qwen35moe"])
def test_real_trace_miss_counts_equal_libcachesim(engine_bin: Path, tmp_path: Path, arch: str) -> None:
    run = run_tracer(
        engine_bin,
        tiny_model(arch),
        tmp_path / "run",
        "-n",
        "48",
        "-ub",
        "8",
        prompt="The quick brown fox jumps over the lazy dog",
    )
    trace = read_trace(run.trace)
    assert trace.n_steps > 48  # several prompt micro-batches and 48 decode steps
    checks = crosscheck_trace(run.trace, tmp_path, [8, 9, 12, 16, 24, 32, 48, 64])
    assert checks >= 4 * len(trace.moe_layers) * 6  # FIFO, LRU, LFU, Belady on every layer cache
