"""`appliance run` up to the first container: bad input, target choice and the dry-run plan."""

import json
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from appliance.cli import cli
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock
from appliance.host.gpu import Gpu
from appliance.models.skeleton import write_skeleton
from appliance.runs.prepare import choose_target
from appliance.runs.profile import PROFILES_DIR, load_profile
from tests.conftest import REPO, run_cli

QWEN = "Qwen3.5-35B-A3B-UD-IQ4_NL.gguf"
QWEN_SHA = "6aec31ed654fbf12f9950c98bab0a09faea433ffdc4b3acfeb55a1f050e3e444"
GIB8 = str(8 << 30)


@pytest.fixture
def fake_qwen(tmp_path: Path) -> Path:
    """A sparse file of the exact size, the model's header (its skeleton) first so placement can
    be planned: takes no disk, fails any digest check."""
    models = tmp_path / "models"
    models.mkdir()
    write_skeleton(REPO / "evidence" / "plans" / "qwen35-35b-a3b-ud-iq4_nl.input.json", models / QWEN)
    with open(models / QWEN, "r+b") as handle:
        handle.truncate(17_821_719_168)
    return models


def test_empty_models_dir_fails_fast_with_file_size_digest(tmp_path: Path) -> None:
    result = run_cli("run", "qwen35-8g", "--models", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    for expected in (QWEN, "17,821,719,168 bytes", QWEN_SHA, "unsloth/Qwen3.5-35B-A3B-GGUF"):
        assert expected in result.stderr
    assert list(tmp_path.iterdir()) == []
    assert not Path("runs").exists() or all("qwen35-8g" not in p.name for p in Path("runs").iterdir())


def test_dry_run_shows_limit_readonly_mount_and_gpu_request(fake_qwen: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_cli(
        "run", "qwen35-8g", "--models", str(fake_qwen), "--dry-run", "--skip-digest-check", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "sha256 NOT CHECKED (--skip-digest-check)" in text
    assert f"limit 8 GiB ({GIB8} bytes), memory+swap 8 GiB" in text
    assert f"--memory {GIB8} --memory-swap {GIB8}" in text
    assert f"-v {fake_qwen}:/models:ro" in text
    assert "--gpus device=0" in text and "--network none --cap-drop ALL" in text
    assert "-e LLAMA_MMAP_DEMAND=1" in text
    assert text.count("llama-moe-trace -m /models/" + QWEN) == 2
    assert "006-demand-mmap-r3" in text
    assert not out.exists()  # a dry run writes nothing
    assert [p.name for p in fake_qwen.iterdir()] == [QWEN]


def test_dry_run_json_holds_the_exact_container_parameters(fake_qwen: Path) -> None:
    result = run_cli(
        "run",
        "qwen35-8g",
        "--models",
        str(fake_qwen),
        "--dry-run",
        "--skip-digest-check",
        "--json",
        "--repeats",
        "1",
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["model_digest"] == "skipped"
    assert len(plan["containers"]) == 2
    for spec in plan["containers"]:
        assert spec["mem_limit"] == spec["memswap_limit"] == 8 << 30
        assert spec["volumes"][str(fake_qwen)] == {"bind": "/models", "mode": "ro"}
        assert spec["network_mode"] == "none" and spec["cap_drop"] == ["ALL"]
        assert spec["security_opt"] == ["no-new-privileges"] and spec["read_only"] is True
        assert spec["device_requests"][0]["Capabilities"] == [["gpu"]]
    assert plan["containers"][1]["environment"] == {"LLAMA_MMAP_DEMAND": "1"}


def test_wrong_size_is_refused_with_exit_3(tmp_path: Path) -> None:
    (tmp_path / QWEN).write_bytes(b"GGUF")
    result = run_cli("run", "qwen35-8g", "--models", str(tmp_path), "--dry-run")
    assert result.returncode == 3
    assert "has 4 bytes, the profile pins 17,821,719,168" in result.stderr


def test_a_gpu_profile_without_a_gpu_points_to_doctor(
    fake_qwen: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("appliance.runs.prepare.visible_gpus", lambda: [])
    result = CliRunner().invoke(cli, ["run", "qwen35-8g", "--models", str(fake_qwen), "--skip-digest-check"])
    assert isinstance(result.exception, ApplianceError)
    assert "needs an NVIDIA GPU and none is visible" in str(result.exception)
    assert "appliance doctor" in str(result.exception)


def test_docker_down_is_one_line(tmp_path: Path) -> None:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["model"].update(file="tiny.gguf", bytes=4096, sha256=None)
    profile = tmp_path / "tiny.yaml"
    profile.write_text(yaml.safe_dump(raw))
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny.gguf").write_bytes(os.urandom(4096))
    result = run_cli(
        "run",
        str(profile),
        "--models",
        str(models),
        "--out",
        str(tmp_path / "r"),
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"},
    )
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"error: Docker engine at unix://{tmp_path}/no-docker.sock (DOCKER_HOST) not reachable: "
    )
    assert "point DOCKER_HOST at a running engine" in result.stderr
    assert "appliance doctor" in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "r").exists()


def _gpu(capability: str) -> list[Gpu]:
    return [Gpu(0, "test GPU", capability, "580.1", 32 << 30, 30 << 30)]


def test_auto_target_follows_the_compute_capability() -> None:
    qwen, lock = load_profile("qwen35-8g"), load_lock()
    assert choose_target(qwen, _gpu("12.0"), lock, dry_run=False).target == "sm120"
    assert choose_target(qwen, _gpu("8.9"), lock, dry_run=False).target == "sm89"
    assert choose_target(qwen, _gpu("8.9"), lock, dry_run=False).gpu_ids == ("0",)
    with pytest.raises(ApplianceError, match="compute capability 8.6"):
        choose_target(qwen, _gpu("8.6"), lock, dry_run=False)
    tiny = load_profile("tiny-oversub")
    choice = choose_target(tiny, _gpu("12.0"), lock, dry_run=False)
    assert (choice.target, choice.gpu_ids) == ("cpu", None)
    dry = choose_target(qwen, [], lock, dry_run=True)
    assert dry.target is None and dry.gpu_ids == ("0",) and "appliance doctor" in str(dry.note)
