"""compose.yaml: valid for Debian's docker-compose, with the isolation `appliance run` applies."""

import shutil
import subprocess

import pytest
import yaml

from tests.conftest import REPO, unavailable

GPU_SERVICES = ("trial-sm89", "trial-sm120")


def _compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    if binary is None:
        unavailable("docker-compose not installed (apt-get install docker-compose)")
    assert binary is not None
    return subprocess.run(
        [binary, "-f", str(REPO / "compose.yaml"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


@pytest.fixture(scope="module")
def resolved() -> dict:  # type: ignore[type-arg]
    result = _compose(
        "config",
        env={"PATH": "/usr/bin:/bin", "MEM_LIMIT": "512m", "MODELS_DIR": "/srv/models", "MODEL": "tiny.gguf"},
    )
    assert result.returncode == 0, result.stderr
    return dict(yaml.safe_load(result.stdout))


def test_docker_compose_config_accepts_the_file() -> None:
    result = _compose("config", "-q")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


def test_one_service_per_target(resolved: dict) -> None:  # type: ignore[type-arg]
    assert sorted(resolved["services"]) == ["trial-cpu", "trial-sm120", "trial-sm89"]


def test_every_service_is_isolated_like_appliance_run(resolved: dict) -> None:  # type: ignore[type-arg]
    for name, service in resolved["services"].items():
        assert service["network_mode"] == "none", name
        assert service["mem_limit"] == service["memswap_limit"] == "512m", name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name
        models = [v for v in service["volumes"] if v["target"] == "/models"]
        assert models == [
            {"type": "bind", "source": "/srv/models", "target": "/models", "read_only": True}
        ], name
        assert any(v["target"] == "/results" and not v.get("read_only") for v in service["volumes"])
        assert "/models/tiny.gguf" in service["command"], name


def test_gpu_reservations_only_for_gpu_targets(resolved: dict) -> None:  # type: ignore[type-arg]
    for name, service in resolved["services"].items():
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        if name in GPU_SERVICES:
            assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}], name
        else:
            assert devices == [], name
