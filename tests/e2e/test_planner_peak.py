"""The planner's predicted memory peak against the cgroup peak the runner measures, on tiny
models in the cpu engine image: within the planner's goal (5%) and never under, for a run that
maps the whole model and for a demand-mapped one, whose resident model pages the page model
predicts from the trial's own route trace."""

import json
from pathlib import Path

import pytest
import yaml

from appliance.analysis.placement import GOAL_PCT
from appliance.core.units import PAGE_BYTES
from appliance.planner.accounting import account_file
from appliance.planner.pages import resident_file_bytes
from appliance.planner.plan import predicted_peak_bytes
from appliance.runs.profile import PROFILES_DIR
from appliance.trace.format import chosen_experts, read_trace
from tests.conftest import run_cli
from tests.e2e.conftest import models_dir_with
from tests.models import tiny_model

LIMIT = 1 << 30


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.parametrize("arch", ["qwen3moe", "qwen35moe"])
def test_predicted_peak_is_within_5_percent_over_the_measured_cgroup_peak_and_never_under(
    engine_image_cpu: str, tmp_path: Path, arch: str
) -> None:
    model = tiny_model(arch, size="400MiB")
    models = models_dir_with(model, tmp_path)
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw.update(name=f"peak-{arch}", evidence=[])
    raw["model"].update(file=model.name, bytes=None, sha256=None, synth=None)
    raw["limits"]["memory"] = "1GiB"
    raw["variants"] = [v for v in raw["variants"] if v["name"] in ("baseline", "demand-mmap")]
    raw["schedule"].update(repeats=1, n_predict=16)
    profile = tmp_path / "peak.yaml"
    profile.write_text(yaml.safe_dump(raw))
    run = tmp_path / "run"
    result = run_cli(
        "run",
        str(profile),
        "--models",
        str(models),
        "--out",
        str(run),
        "--image",
        engine_image_cpu,
        "--unsigned",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    acc = account_file(model)
    trials = {json.loads((t / "trial.json").read_text())["variant"]: t for t in run.glob("trials/*")}
    assert sorted(trials) == ["baseline", "demand-mmap"]
    for variant, trial in trials.items():
        assert json.loads((trial / "trial.json").read_text())["status"] == "ok"
        measured = json.loads((trial / "cgroup.json").read_text())["peak_bytes"]
        timing = json.loads((trial / "timing.json").read_text())
        prompt = timing["n_prompt_tokens"]
        trace = read_trace(trial / "trace.moetrace")
        experts = chosen_experts(trace.layers, trace.ids) if variant == "demand-mmap" else None
        predicted = predicted_peak_bytes(
            acc, LIMIT, ctx=prompt + timing["n_decode_tokens"] + 1, prompt_tokens=prompt, experts=experts
        )
        assert measured <= predicted <= measured * (1 + GOAL_PCT / 100), (variant, predicted, measured)
        if experts is not None:
            # the engine mapped the pages the page model names, but for the header (read(2),
            # not mapped) and the token embedding rows no token looked up (counted whole)
            mapped = timing["residency_at_end"]["model_mapped_rss_bytes"]
            resident = resident_file_bytes(acc, experts)
            slack = acc.header_bytes + acc.groups["embeddings"] + 2 * PAGE_BYTES
            assert resident < acc.tensor_data_bytes  # some experts were never chosen
            assert mapped <= resident <= mapped + slack, (resident, mapped, slack)
