"""The active series on the current track (b11549, with its variants of 0001 and 0002), built on
the host as `appliance engine build --local --source b11549` builds it, against the canonical
track's b10229 build: the same tiny model, the same prompt, plain and demand-mapped, give the
same text and the same routes, and demand mmap reads only what it touches on both."""

from pathlib import Path

import numpy as np
import pytest

from appliance.trace.format import read_trace
from tests.e2e.conftest import locally_built, run_tracer
from tests.e2e.test_demand_mmap import evict
from tests.models import tiny_model

pytestmark = [pytest.mark.slow]

PROMPT = "The cat sat on the mat. The dog sat on the log."


@pytest.fixture(scope="module")
def current_bin() -> Path:
    """bin/ of the patched b11549 stand-in, built locally (cached under APPLIANCE_CACHE)."""
    return locally_built("b11549")


@pytest.mark.parametrize("demand", [False, True], ids=["plain-mmap", "demand-mmap"])
def test_both_tracks_give_the_same_text_and_routes(
    engine_bin: Path, current_bin: Path, tmp_path: Path, demand: bool
) -> None:
    model = tiny_model("qwen3moe")
    env = {"LLAMA_MMAP_DEMAND": "1"} if demand else {}
    args = ("-n", "16", "--ignore-eos", "--weights", *(("--no-repack",) if demand else ()))
    runs = {}
    for name, bin_dir in (("canonical", engine_bin), ("current", current_bin)):
        evict(model)
        runs[name] = run_tracer(bin_dir, model, tmp_path / name, *args, prompt=PROMPT, env=env)
    canonical, current = runs["canonical"], runs["current"]
    assert current.timings["llama_build"].startswith("11549 ")
    assert not canonical.timings["llama_build"].startswith("11549 ")
    assert current.text == canonical.text != b""
    ours, theirs = read_trace(current.trace).rows, read_trace(canonical.trace).rows
    assert len(ours) == len(theirs) > 0
    for column in ours.dtype.names or ():
        assert np.array_equal(ours[column], theirs[column]), column
    for run in (canonical, current):
        assert run.timings["mmap_demand"] == ("1" if demand else "")
        mapped_after_load = run.timings["residency_after_load"]["model_mapped_rss_bytes"]
        if demand:  # nothing of the model is read at load: it is touched by the computation
            assert mapped_after_load < run.timings["model_bytes"] // 10
        else:  # the plain mapping reads the whole file at load (MAP_POPULATE and WILLNEED)
            assert mapped_after_load > run.timings["model_bytes"] // 2
