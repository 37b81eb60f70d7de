"""Shared fixtures: Docker and engine availability with CI's fail-not-skip rule."""

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from appliance.host.cgroups import BlockDevice, block_device_for

REPO = Path(__file__).resolve().parent.parent


def docker_required() -> bool:
    return os.environ.get("APPLIANCE_REQUIRE_DOCKER") == "1"


def unavailable(reason: str) -> None:
    """Fail under APPLIANCE_REQUIRE_DOCKER=1 (CI), skip elsewhere: a skipped test proves nothing."""
    if docker_required():
        pytest.fail(f"{reason} (required: APPLIANCE_REQUIRE_DOCKER=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means no engine
        unavailable(f"Docker engine not reachable: {exc}")
    return client


@pytest.fixture(scope="session")
def runtime_base_image(docker_client) -> str:  # type: ignore[no-untyped-def]
    """The project's registry-free minbase Debian runtime base (sh, coreutils, apt, dpkg), made if
    missing: a bare Debian for tests, not the cpu image's slim base (which has no apt or dpkg)."""
    from appliance.images.base import base_tag, ensure_base

    ref = base_tag("runtime")
    ensure_base(ref, log=lambda _: None)
    return ref


class DiskModel(NamedTuple):
    path: Path  # a 4 KiB file
    device: BlockDevice  # the whole disk holding it, its read_ahead_kb as found
    other_kb: int  # a read-ahead the device does not hold now


@pytest.fixture
def disk_model(tmp_path: Path) -> DiskModel:
    """A model file in tmp_path on this machine's disk, whose read-ahead a test may change: only
    as root; without root, or with tmp_path on no block device, it fails under
    APPLIANCE_REQUIRE_DOCKER=1."""
    if os.geteuid() != 0:
        unavailable("writing a device's read_ahead_kb needs root")
    model = tmp_path / "models" / "m.gguf"
    model.parent.mkdir()
    model.write_bytes(bytes(4096))
    device = block_device_for(model)
    if device is None or device.read_ahead_kb is None:
        unavailable(f"{tmp_path} is on no block device with a read_ahead_kb")
    return DiskModel(model, device, 128 if device.read_ahead_kb != 128 else 256)


def lock_with(tmp_path: Path, edit: Callable[[dict[str, Any]], Any]) -> Path:
    """A copy of the repository's lock, changed by `edit`, written under tmp_path."""
    raw = json.loads((REPO / "engine" / "llama.cpp.lock.json").read_text())
    edit(raw)
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(raw))
    return path


def sigint_default() -> None:
    """preexec_fn for a child that a test interrupts with SIGINT: a shell that started the tests
    in the background without job control left SIGINT ignored, and an ignored SIGINT stays
    ignored across exec, so the child would never see its Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(
    *args: str, env: dict[str, str] | None = None, check: bool = False, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run `python -m appliance ARGS` as a user would, capturing output."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    result = subprocess.run(
        [sys.executable, "-m", "appliance", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=REPO,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"appliance {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `make mutation` (mutmut names the mutant in MUTANT_UNDER_TEST), the test files
    named after the mutated module run first: a mutant's run stops at its first failure, and
    those files hold the exact expectations most likely to fail. Otherwise the order is kept."""
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if "__mutmut_" not in mutant:
        return
    module = mutant.rpartition(".")[0].rpartition(".")[2]  # appliance.attest.verify.x_f__mutmut_7
    items.sort(key=lambda item: module not in item.path.name)  # stable: the rest keep their order
