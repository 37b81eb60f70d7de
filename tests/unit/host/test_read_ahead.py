"""A device's read-ahead held at a value for a `with` block and put back however the block ends,
against a sysfs tree in tmp_path; a file the kernel refuses to write, even to root (a read-only
sysfs attribute); and this machine's own disk, as root (`disk_model`)."""

from pathlib import Path

import pytest

from appliance.host.read_ahead import (
    ReadAheadError,
    ReadAheadHold,
    ReadAheadMode,
    check_settable,
    current_kb,
    read_ahead_file,
)
from tests.conftest import DiskModel, unavailable

KEY = "8:0"
# a sysfs attribute without a write method: the kernel answers EACCES to any writer, root included
READ_ONLY_ATTRIBUTE = Path("/sys/devices/system/cpu/kernel_max")


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A sysfs root whose device 8:0 reads ahead 8192 KiB."""
    root = tmp_path / "sys"
    queue = root / "dev" / "block" / KEY / "queue"
    queue.mkdir(parents=True)
    (queue / "read_ahead_kb").write_text("8192\n")
    return root


def held_now(sysfs: Path) -> int:
    return int(read_ahead_file(KEY, sysfs).read_text())


def refusing_writes(sysfs: Path) -> Path:
    """The device's read_ahead_kb made a link to a read-only kernel attribute; returns the file."""
    if not READ_ONLY_ATTRIBUTE.is_file():
        unavailable(f"no {READ_ONLY_ATTRIBUTE} (sysfs not mounted)")
    path = read_ahead_file(KEY, sysfs)
    path.unlink()
    path.symlink_to(READ_ONLY_ATTRIBUTE)
    return path


def test_the_current_value_is_read_from_the_device_queue_and_none_without_one(sysfs: Path) -> None:
    assert read_ahead_file(KEY, sysfs) == sysfs / "dev/block/8:0/queue/read_ahead_kb"
    assert current_kb(KEY, sysfs) == 8192
    assert current_kb("9:9", sysfs) is None


def test_the_value_is_held_inside_the_block_and_the_previous_one_written_back(sysfs: Path) -> None:
    with ReadAheadHold(KEY, 128, sysfs) as hold:
        assert held_now(sysfs) == 128 == hold.in_force_kb
        assert hold.restored_kb is None and hold.mode == ReadAheadMode.SET
    assert held_now(sysfs) == 8192 == hold.restored_kb


@pytest.mark.parametrize("ending", [RuntimeError("engine failed"), KeyboardInterrupt()])
def test_the_previous_value_comes_back_when_the_block_raises(sysfs: Path, ending: BaseException) -> None:
    with pytest.raises(type(ending)), ReadAheadHold(KEY, 128, sysfs):
        assert held_now(sysfs) == 128
        raise ending
    assert held_now(sysfs) == 8192


def test_an_early_restore_writes_once(sysfs: Path) -> None:
    """The runner restores first after Ctrl-C; the block's end must not write a second time."""
    with ReadAheadHold(KEY, 128, sysfs) as hold:
        hold.restore()
        assert held_now(sysfs) == 8192 == hold.restored_kb
        read_ahead_file(KEY, sysfs).write_text("512\n")  # someone else's change after ours
    assert held_now(sysfs) == 512


def test_observe_only_reads_even_a_file_that_refuses_writes(sysfs: Path) -> None:
    refusing_writes(sysfs)
    with ReadAheadHold(KEY, None, sysfs) as hold:
        assert hold.in_force_kb == int(READ_ONLY_ATTRIBUTE.read_text())
        assert hold.mode == ReadAheadMode.OBSERVE
    assert hold.restored_kb is None


def test_a_file_the_kernel_refuses_to_write_is_named_and_left_alone(sysfs: Path) -> None:
    path = refusing_writes(sysfs)
    before = path.read_text()
    with pytest.raises(ReadAheadError) as info:
        check_settable(KEY, sysfs)
    assert str(info.value) == f"cannot write {path}: Permission denied"
    with pytest.raises(ReadAheadError, match="Permission denied"), ReadAheadHold(KEY, 128, sysfs):
        pytest.fail("the block ran though the value could not be set")
    assert path.read_text() == before


def test_a_value_that_cannot_be_read_cannot_be_set(sysfs: Path) -> None:
    check_settable(KEY, sysfs)  # writes 8192 back: allowed here
    assert held_now(sysfs) == 8192
    with pytest.raises(ReadAheadError) as info:
        check_settable("9:9", sysfs)
    assert str(info.value) == f"cannot read {read_ahead_file('9:9', sysfs)}"
    with pytest.raises(ReadAheadError, match=r"cannot set read-ahead to 128 KiB: cannot read .*9:9"):
        ReadAheadHold("9:9", 128, sysfs).__enter__()
    with pytest.raises(ReadAheadError, match=r"128 KiB: the file is on no block device$"):
        ReadAheadHold(None, 128, sysfs).__enter__()


def test_a_restore_that_fails_says_how_to_put_the_value_back(sysfs: Path) -> None:
    with pytest.raises(ReadAheadError) as info, ReadAheadHold(KEY, 128, sysfs):
        path = refusing_writes(sysfs)  # the file stops taking writes during the trial
    assert str(info.value) == (
        f"cannot write {path}: Permission denied: read-ahead left at 128 KiB; "
        f"put it back with `echo 8192 > {path}`"
    )


def test_this_machines_disk_holds_the_value_inside_the_block_and_gets_its_own_back(
    disk_model: DiskModel,
) -> None:
    queue = read_ahead_file(disk_model.device.key)
    before, other = disk_model.device.read_ahead_kb, disk_model.other_kb
    with ReadAheadHold(disk_model.device.key, other) as hold:
        assert int(queue.read_text()) == other == hold.in_force_kb
    assert int(queue.read_text()) == before == hold.restored_kb
    # the kernel keeps whole pages: 2 KiB more reads back as the page below (why profiles refuse it)
    with ReadAheadHold(disk_model.device.key, other + 2) as hold:
        assert int(queue.read_text()) == other == hold.in_force_kb
    assert int(queue.read_text()) == before
