"""The filesystem under an output path: tmpfs is recognized, free space is statvfs's."""

import os
from pathlib import Path

import pytest

from appliance.core.errors import ApplianceError
from appliance.host import filesystems


def test_a_new_file_lands_in_the_nearest_existing_directory(tmp_path: Path) -> None:
    assert filesystems.existing_dir(tmp_path / "a" / "b" / "m.gguf") == tmp_path
    assert filesystems.existing_dir(tmp_path / "m.gguf") == tmp_path


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_dev_shm_is_tmpfs_and_the_test_directory_is_not() -> None:
    assert filesystems.fs_magic(Path("/dev/shm")) == filesystems.TMPFS_MAGIC
    with pytest.raises(ApplianceError, match=r"^/dev/shm is on tmpfs: its pages cannot be evicted"):
        filesystems.refuse_unfit_target(Path("/dev/shm/x/m.gguf"), 1, "the model")


def test_free_space_is_statvfs_available_blocks_and_the_refusal_names_both_sizes(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    free = filesystems.free_bytes(tmp_path)
    assert abs(free - st.f_bavail * st.f_frsize) < 64 << 20  # other writers may move it a little
    if filesystems.fs_magic(tmp_path) in filesystems.VOLATILE:
        pytest.skip("the test directory is itself on tmpfs")
    filesystems.refuse_unfit_target(tmp_path / "m.gguf", 1, "the model")
    with pytest.raises(
        ApplianceError, match=r" free; writing the model takes 1024\.00 TiB \(1125899906842624 bytes\)"
    ):
        filesystems.refuse_unfit_target(tmp_path / "m.gguf", 1 << 50, "the model")


def test_a_missing_directory_cannot_be_examined() -> None:
    with pytest.raises(ApplianceError, match="cannot examine the filesystem of /nonexistent-appliance"):
        filesystems.fs_magic(Path("/nonexistent-appliance"))
