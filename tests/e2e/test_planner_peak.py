"""The planner's predicted memory peak against the cgroup peak the runner measures, on tiny
models in the cpu engine image (the planner aims within 15%)."""

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from appliance.planner.accounting import account_file
from appliance.planner.plan import predicted_peak_bytes
from appliance.runs.profile import PROFILES_DIR
from tests.conftest import run_cli
from tests.models import tiny_model

LIMIT = 1 << 30


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.parametrize("arch", ["qwen3moe", "qwen35moe"])
def test_predicted_peak_is_within_15_percent_of_the_measured_cgroup_peak(
    engine_image_cpu: str, tmp_path: Path, arch: str
) -> None:
    model = tiny_model(arch, size="400MiB")
    models = tmp_path / "models"
    models.mkdir()
    try:  # the directory is mounted read-only into the container: no symlinks out of it
        os.link(model, models / model.name)
    except OSError:
        shutil.copyfile(model, models / model.name)
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw.update(name=f"peak-{arch}", evidence=[])
    raw["model"].update(file=model.name, bytes=None, sha256=None, synth=None)
    raw["limits"]["memory"] = "1GiB"
    raw["variants"] = [v for v in raw["variants"] if v["name"] == "baseline"]
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
    trial = next(run.glob("trials/*"))
    assert json.loads((trial / "trial.json").read_text())["status"] == "ok"
    measured = json.loads((trial / "cgroup.json").read_text())["peak_bytes"]
    timing = json.loads((trial / "timing.json").read_text())
    prompt = timing["n_prompt_tokens"]
    predicted = predicted_peak_bytes(
        account_file(model), LIMIT, ctx=prompt + timing["n_decode_tokens"] + 1, prompt_tokens=prompt
    )
    assert abs(predicted - measured) / measured < 0.15, (predicted, measured)
