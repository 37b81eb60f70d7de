"""`make scale`'s plan (`appliance scale --dry-run`): the trials, the time it expects and the disk
the missing models need, said before anything starts; a models directory on tmpfs refused."""

import shutil
import tempfile
from pathlib import Path

import pytest

from appliance.host.filesystems import TMPFS_MAGIC, fs_magic
from appliance.workflows.scale import EXPECTED_TRIAL_S, HASH_BPS, SYNTH_BPS, scale_plan
from tests.conftest import run_cli

QWEN35, QWEN3 = 17_940_038_176, 18_554_438_496


def test_the_plan_counts_trials_and_prices_the_missing_models(tmp_path: Path) -> None:
    steps = scale_plan(tmp_path)
    assert [(s.profile, s.model.name, s.model_bytes, s.missing, s.trials) for s in steps] == [
        ("qwen35-shape-8g", "qwen35-shape.gguf", QWEN35, True, 21),  # 1 limit x 7 variants x 3
        ("qwen3-30b-shape", "qwen3-30b-shape.gguf", QWEN3, True, 27),  # 1 limit x 9 variants x 3
    ]
    assert steps[1].expected_s() == pytest.approx(
        QWEN3 / SYNTH_BPS + QWEN3 / HASH_BPS + 27 * EXPECTED_TRIAL_S["qwen3-30b-shape"]
    )
    with open(tmp_path / "qwen3-30b-shape.gguf", "wb") as handle:  # present: nothing to make
        handle.truncate(QWEN3)
    present = scale_plan(tmp_path)[1]
    assert not present.missing and present.expected_s() == 27 * EXPECTED_TRIAL_S["qwen3-30b-shape"]


def test_the_dry_run_says_time_and_disk_first_and_writes_nothing(tmp_path: Path) -> None:
    result = run_cli("scale", "--dry-run", "--models", str(tmp_path))
    out = " ".join(result.stdout.split())
    assert "qwen35-shape-8g: model" in out and "21 trials (3 interleaved repeats)" in out
    assert f"needs 33.99 GiB ({QWEN35 + QWEN3} bytes) of disk for the missing models" in out
    assert "make scale expects about" in out
    assert list(tmp_path.iterdir()) == []
    # the plan is said first either way; a directory without the space is then refused, dry run
    # or not (this machine's free space decides which branch a run takes)
    if shutil.disk_usage(tmp_path).free >= QWEN35 + QWEN3:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0
        assert result.stderr.startswith(f"error: {tmp_path} has ")
        assert result.stderr.rstrip().endswith(
            f"writing the missing models takes 33.99 GiB ({QWEN35 + QWEN3} bytes): free space or choose "
            "another directory"
        )


@pytest.mark.skipif(
    not Path("/dev/shm").is_dir() or fs_magic(Path("/dev/shm")) != TMPFS_MAGIC, reason="no tmpfs"
)
def test_a_models_directory_on_tmpfs_is_refused_before_anything_starts() -> None:
    models = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="appliance-test-"))
    try:
        result = run_cli("scale", "--dry-run", "--models", str(models))
    finally:
        shutil.rmtree(models)
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {models} is on tmpfs: its pages cannot be evicted, so no trial could start cold; "
        "write the missing models to a disk-backed directory\n"
    )
