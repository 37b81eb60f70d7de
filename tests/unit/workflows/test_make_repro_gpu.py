"""`make repro-sm120` on a machine without a GPU stops at the preflight, before any build."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("target", ["sm120", "sm89"])
def test_gpu_reproduction_without_a_gpu_fails_before_building(target: str, tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        XDG_CONFIG_HOME=str(tmp_path),
        APPLIANCE_CACHE=str(tmp_path / "cache"),
    )
    result = subprocess.run(
        ["make", "-o", "venv", f"repro-{target}", f"VENV={venv}", f"MODELS={tmp_path}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert f"target {target} needs an NVIDIA GPU of compute capability" in result.stderr
    assert "appliance doctor" in result.stderr
    assert not (tmp_path / "cache").exists()  # nothing fetched, nothing built
    assert not (tmp_path / "appliance" / "keys").exists()  # stopped before making a key
