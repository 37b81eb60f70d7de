"""`appliance sweep --dry-run` and the refusals that come before anything starts."""

import json
from pathlib import Path

import pytest
import yaml

from appliance.runs.profile import PROFILES_DIR
from tests.conftest import run_cli
from tests.models import tiny_model


@pytest.fixture(scope="module")
def sweep_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A models directory with a 32 MiB synthesized MoE and a profile naming it."""
    root = tmp_path_factory.mktemp("sweep")
    model = tiny_model("qwen3moe", size="32MiB")
    models = root / "models"
    models.mkdir()
    (models / "tiny.gguf").symlink_to(model)
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["name"] = "tiny-sweep"
    raw["model"] |= {"file": "tiny.gguf", "bytes": None, "sha256": None, "synth": None}
    raw["limits"]["engine_min_memory"] = "8MiB"
    raw["sweep"] = {"memory": ["0.5", "24MiB", 2], "n_predict": 64}
    profile = root / "tiny-sweep.yaml"
    profile.write_text(yaml.safe_dump(raw))
    return models, profile


def test_dry_run_prints_the_grid_and_the_predicted_time(
    sweep_setup: tuple[Path, Path], tmp_path: Path
) -> None:
    models, profile = sweep_setup
    out = tmp_path / "run"
    result = run_cli(
        "sweep",
        str(profile),
        "--models",
        str(models),
        "--dry-run",
        "--repeats",
        "1",
        "--out",
        str(out),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    size = (models / "tiny.gguf").stat().st_size
    assert plan["limits"] == sorted([size // 2 // 4096 * 4096, 24 << 20, size * 2 // 4096 * 4096])
    assert len(plan["trials"]) == 9
    assert plan["trials"][0].startswith("001-") and "-baseline-r1" in plan["trials"][0]
    assert plan["predicted_seconds"] > 0
    assert "predicted time: about" in result.stderr and "disk probe:" in result.stderr
    # the header names the sweep's limits, not the profile's 200 MiB (nor its description's)
    assert "profile tiny-sweep, swept over 3 memory limits" in result.stderr
    assert "under a 200 MiB limit" not in result.stderr and "limit 200 MiB" not in result.stderr
    assert "memory      limits " in result.stderr and "24 MiB" in result.stderr
    assert not out.exists()


def test_memory_option_overrides_the_profile(sweep_setup: tuple[Path, Path]) -> None:
    models, profile = sweep_setup
    result = run_cli(
        "sweep",
        str(profile),
        "--models",
        str(models),
        "--dry-run",
        "--memory",
        "16MiB,20MiB",
        "--repeats",
        "2",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["limits"] == [16 << 20, 20 << 20] and len(plan["trials"]) == 12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--memory", "4MiB"], "below profile tiny-sweep's engine minimum"),
        (["--memory", "0.0000000001"], "rounds to zero bytes"),
        (["--memory", "0.5", "--max-hours", "0.0001"], "more than --max-hours 0.0001"),
        (["--memory", "half"], "expected a fraction of the model"),
        # host RAM is checked against the largest limit a trial runs under, not the profile's
        (["--memory", "24MiB,4096GiB"], "the sweep limit 4096GiB (4 TiB) exceeds this host's"),
    ],
)
def test_bad_sweeps_are_refused_in_one_line(
    sweep_setup: tuple[Path, Path], tmp_path: Path, args: list[str], message: str
) -> None:
    models, profile = sweep_setup
    out = tmp_path / "run"
    result = run_cli("sweep", str(profile), "--models", str(models), "--out", str(out), *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert not out.exists()


def test_a_profile_without_a_sweep_needs_memory(tmp_path: Path) -> None:
    result = run_cli("sweep", "qwen3-30b-16", "--models", str(tmp_path), "--dry-run")
    assert result.returncode != 0
    assert "declares no sweep: give the limits with --memory" in result.stderr
