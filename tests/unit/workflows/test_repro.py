"""`make repro-<target>` preflight: a machine that cannot run the target stops before building."""

from pathlib import Path

import pytest

from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock
from appliance.host.gpu import Gpu, visible_gpus
from appliance.workflows.repro import preflight
from tests.conftest import run_cli


def gpu(cc: str, driver: str = "580.95.05", name: str = "NVIDIA GeForce RTX 5090") -> Gpu:
    """A hand-made record of what NVML would report (no GPU exists on these machines)."""
    return Gpu(0, name, cc, driver, 32 << 30, 31 << 30, "13.0")


def test_cpu_target_needs_nothing() -> None:
    assert preflight(load_lock(), "cpu", [], None, None) == ["tiny-oversub"]


def test_gpu_target_without_gpu_fails_with_the_reason() -> None:
    with pytest.raises(
        ApplianceError,
        match="repro-sm120: target sm120 needs an NVIDIA GPU "
        "of compute capability 12.0 and NVML finds no GPU",
    ):
        preflight(load_lock(), "sm120", [], Path("/"), None)


def test_wrong_compute_capability_points_to_the_fitting_target() -> None:
    with pytest.raises(
        ApplianceError,
        match=r"needs compute capability 12\.0, found NVIDIA "
        r"GeForce RTX 4090 \(compute capability 8\.9\); "
        "this machine fits repro-sm89",
    ):
        preflight(load_lock(), "sm120", [gpu("8.9", name="NVIDIA GeForce RTX 4090")], Path("/"), None)


def test_old_driver_is_refused() -> None:
    # an R570 driver is too old for the CUDA 13.0.2 images (the lock's cuda_toolkits floor)
    with pytest.raises(ApplianceError, match="needs NVIDIA driver 580.95.05 or newer .* found 575.51.03"):
        preflight(load_lock(), "sm120", [gpu("12.0", driver="575.51.03")], Path("/"), None)


def test_gpu_target_needs_models(tmp_path: Path) -> None:
    with pytest.raises(ApplianceError, match="pass MODELS=DIR"):
        preflight(load_lock(), "sm89", [gpu("8.9")], None, None)
    with pytest.raises(ApplianceError, match="is not a directory"):
        preflight(load_lock(), "sm89", [gpu("8.9")], tmp_path / "absent", None)
    assert preflight(load_lock(), "sm89", [gpu("8.9")], tmp_path, None) == ["qwen35-8g", "qwen3-30b-16"]


NO_DOCKER = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock"


def test_no_docker_stops_every_target_with_the_fix(tmp_path: Path) -> None:
    for target, gpus in (("cpu", []), ("sm89", [gpu("8.9")])):
        with pytest.raises(ApplianceError, match="every reproduction runs in Docker") as refused:
            preflight(load_lock(), target, gpus, tmp_path, NO_DOCKER)
        message = str(refused.value)
        assert message.startswith(f"repro-{target}: {NO_DOCKER}; every reproduction runs in Docker: ")
        assert "appliance doctor" in message


def test_a_missing_gpu_is_named_before_a_missing_docker_engine() -> None:
    # starting dockerd would only lead to the GPU refusal; the hardware is the first thing to know
    with pytest.raises(ApplianceError, match="repro-sm120: target sm120 needs an NVIDIA GPU") as refused:
        preflight(load_lock(), "sm120", [], Path("/"), NO_DOCKER)
    assert "Docker" not in str(refused.value)


def test_unknown_target() -> None:
    with pytest.raises(ApplianceError, match="no reproduction for target 'sm70'"):
        preflight(load_lock(), "sm70", [], None, None)


def test_cli_on_this_machine() -> None:
    """No GPU here: the GPU preflight fails at once; a GPU machine passes it (asserted too)."""
    result = run_cli("repro", "preflight", "sm120", "--models", "/")
    if any(g.compute_capability == "12.0" for g in visible_gpus()):
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 1
        assert result.stderr.startswith("error: repro-sm120: target sm120 needs")
