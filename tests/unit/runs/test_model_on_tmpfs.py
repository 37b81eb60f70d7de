"""A run whose model file is on tmpfs is refused before the first trial: its pages cannot be
evicted, so no trial could start cold."""

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.errors import ApplianceError
from appliance.host.filesystems import TMPFS_MAGIC, fs_magic, refuse_volatile_model
from appliance.runs.profile import load_profile
from tests.conftest import run_cli

SHM = Path("/dev/shm")
pytestmark = pytest.mark.skipif(
    not SHM.is_dir() or fs_magic(SHM) != TMPFS_MAGIC, reason="no tmpfs at /dev/shm"
)


@pytest.fixture
def shm_models() -> Iterator[Path]:
    """A models directory on /dev/shm holding tiny-oversub's file name (a sparse file of its
    size: no memory taken)."""
    models = Path(tempfile.mkdtemp(dir=SHM, prefix="appliance-test-"))
    manifest = load_profile("tiny-oversub").model
    with open(models / manifest.file, "wb") as handle:
        assert manifest.bytes is not None
        handle.truncate(manifest.bytes)
    yield models
    shutil.rmtree(models)


def test_a_model_on_tmpfs_is_refused(shm_models: Path) -> None:
    model = shm_models / "tiny-oversub-qwen3moe.gguf"
    with pytest.raises(ApplianceError, match=r"is on tmpfs: its pages cannot be evicted") as info:
        refuse_volatile_model(model)
    assert str(info.value) == (
        f"model {model} is on tmpfs: its pages cannot be evicted, so no trial could start cold; "
        "move it to a disk-backed directory and pass that as --models"
    )


def test_a_model_on_disk_passes(tmp_path: Path) -> None:
    if fs_magic(tmp_path) == TMPFS_MAGIC:
        pytest.skip("the test directory is itself on tmpfs")
    refuse_volatile_model(tmp_path / "m.gguf")


def test_a_run_is_refused_in_its_preparation_with_one_line(shm_models: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    models = str(shm_models)
    result = run_cli(
        "run", "tiny-oversub", "--models", models, "--dry-run", "--skip-digest-check", "--out", str(out)
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1
    assert f"model {shm_models}/tiny-oversub-qwen3moe.gguf is on tmpfs" in result.stderr
    assert not out.exists()
