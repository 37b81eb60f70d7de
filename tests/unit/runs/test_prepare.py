"""Run and sweep share one chain: the model file is located once per run, and one function
(`appliance.workflows.run.run_prepared`) starts the trials of every run kind."""

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.engine.lock import load_lock
from appliance.runs import model_files, prepare, sweep
from appliance.runs.plan import trial_plan
from appliance.runs.prepare import RunRequest, prepare_run
from appliance.runs.profile import PROFILES_DIR, load_profile
from appliance.runs.sweep import plan_sweep
from tests.conftest import REPO
from tests.models import tiny_model


@pytest.fixture
def located_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every call of the real `locate_model`, wherever it is imported, by the path it returned."""
    calls: list[Path] = []
    real = model_files.locate_model

    def counting(manifest: Any, models_dir: Path, skeleton: bool = False) -> tuple[Path, int]:
        found = real(manifest, models_dir, skeleton)
        calls.append(found[0])
        return found

    for module in (model_files, prepare, sweep):
        monkeypatch.setattr(module, "locate_model", counting)
    return calls


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("chain")
    models = root / "models"
    models.mkdir()
    (models / "tiny.gguf").symlink_to(tiny_model("qwen3moe", size="32MiB"))
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["name"] = "tiny-chain"
    raw["model"] |= {"file": "tiny.gguf", "bytes": None, "sha256": None, "synth": None}
    raw["limits"]["engine_min_memory"] = "8MiB"
    raw["sweep"] = {"memory": ["0.5", "24MiB"], "n_predict": 16}
    path = root / "tiny-chain.yaml"
    path.write_text(yaml.safe_dump(raw))
    return models, path


def test_a_sweep_locates_the_model_file_once(
    tiny_profile: tuple[Path, Path], located_calls: list[Path], tmp_path: Path
) -> None:
    models, path = tiny_profile
    plan, client = plan_sweep(
        load_profile(str(path)),
        models,
        load_lock(),
        memory=None,
        repeats=1,
        out=tmp_path / "run",
        dry_run=True,
        max_hours=6.0,
        skip_digest=True,
    )
    assert client is None and len(plan.prepared.trials) == 2 * 3
    assert located_calls == [models / "tiny.gguf"]
    assert plan.prepared.model.path == models / "tiny.gguf"


def test_a_run_locates_the_model_file_once(
    tiny_profile: tuple[Path, Path], located_calls: list[Path], tmp_path: Path
) -> None:
    models, path = tiny_profile
    profile = load_profile(str(path))
    request = RunRequest(trial_plan(profile, 1), out=tmp_path / "run", dry_run=True, skip_digest=True)
    prepared, _ = prepare_run(profile, models, load_lock(), request, client_factory=None)
    assert located_calls == [models / "tiny.gguf"] and prepared.model.bytes > 0


def calls_of(name: str) -> list[str]:
    """The module of every call of `name` in appliance/."""
    found = []
    for file in sorted((REPO / "appliance").rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == name
            ):
                found.append(f"{file.relative_to(REPO).as_posix()}")
    return found


def test_one_function_starts_the_trials_of_every_run_kind() -> None:
    assert calls_of("execute_run") == ["appliance/workflows/run.py"]
    # a run's context is made once, by the chain; a cluster worker makes one for its one trial
    assert sorted(calls_of("RunContext")) == ["appliance/runs/trial.py", "appliance/workflows/run.py"]
    # the seal: handed to the runner by the chain; called directly only by `bundle seal`
    assert calls_of("finalize_bundle") == ["appliance/cli/bundle.py"]
    assert sorted(calls_of("run_prepared")) == ["appliance/workflows/run.py", "appliance/workflows/sweep.py"]
