"""The kernel's read-ahead of a block device (`/sys/dev/block/MAJ:MIN/queue/read_ahead_kb`):
read it, check it can be written, and hold it at a value for the length of a `with` block.

The kernel keeps the value in pages: a write of a size that is not a whole number of pages is
rounded down, so callers write multiples of `PAGE_KB` and read the value back.
"""

from enum import StrEnum
from pathlib import Path

from appliance.core.errors import ApplianceError
from appliance.core.units import PAGE_BYTES

SYSFS = Path("/sys")
PAGE_KB = PAGE_BYTES // 1024


class ReadAheadMode(StrEnum):
    SET = "set"  # written for each trial, the previous value written back after it
    OBSERVE = "observe"  # only read and recorded


class ReadAheadError(ApplianceError):
    """The read-ahead file cannot be read or written; the message names it."""


def read_ahead_file(device_key: str, sysfs: Path = SYSFS) -> Path:
    """The read_ahead_kb file of the whole-disk device MAJ:MIN."""
    return sysfs / "dev" / "block" / device_key / "queue" / "read_ahead_kb"


def current_kb(device_key: str, sysfs: Path = SYSFS) -> int | None:
    """The device's read-ahead in KiB, or None when its file cannot be read."""
    try:
        return int(read_ahead_file(device_key, sysfs).read_text().strip())
    except (OSError, ValueError):
        return None


def _write(path: Path, kb: int) -> None:
    try:
        path.write_text(f"{kb}\n")
    except OSError as exc:
        raise ReadAheadError(f"cannot write {path}: {exc.strerror}") from None


def check_settable(device_key: str, sysfs: Path = SYSFS) -> None:
    """Write the device's read-ahead back unchanged: a ReadAheadError naming the file when it
    cannot be read or this process may not write it (not root, a read-only sysfs)."""
    path = read_ahead_file(device_key, sysfs)
    kb = current_kb(device_key, sysfs)
    if kb is None:
        raise ReadAheadError(f"cannot read {path}")
    _write(path, kb)


class ReadAheadHold:
    """The device's read-ahead while a `with` block runs: set to `kb` on entry and written back
    to its previous value when the block ends, however it ends (`restore` may do it earlier; it
    writes once). With `kb` None the value is only read. A device_key of None (a file on no
    block device) reads as None and cannot be set."""

    def __init__(self, device_key: str | None, kb: int | None, sysfs: Path = SYSFS) -> None:
        self.device_key = device_key
        self.kb = kb
        self.sysfs = sysfs
        self.in_force_kb: int | None = None  # read back after the write: what the kernel holds
        self.restored_kb: int | None = None  # the previous value, once written back
        self._undo: tuple[Path, int] | None = None  # the file and the value restore writes

    @property
    def mode(self) -> ReadAheadMode:
        return ReadAheadMode.OBSERVE if self.kb is None else ReadAheadMode.SET

    def __enter__(self) -> "ReadAheadHold":
        previous = None if self.device_key is None else current_kb(self.device_key, self.sysfs)
        if self.kb is None:
            self.in_force_kb = previous
            return self
        if self.device_key is None:
            raise ReadAheadError(f"cannot set read-ahead to {self.kb} KiB: the file is on no block device")
        path = read_ahead_file(self.device_key, self.sysfs)
        if previous is None:
            raise ReadAheadError(f"cannot set read-ahead to {self.kb} KiB: cannot read {path}")
        _write(path, self.kb)
        self._undo = (path, previous)
        self.in_force_kb = current_kb(self.device_key, self.sysfs)
        return self

    def restore(self) -> None:
        if self._undo is None:
            return
        (path, previous), self._undo = self._undo, None
        try:
            _write(path, previous)
        except ReadAheadError as exc:
            raise ReadAheadError(
                f"{exc}: read-ahead left at {self.in_force_kb} KiB; "
                f"put it back with `echo {previous} > {path}`"
            ) from None
        self.restored_kb = previous

    def __exit__(self, *exc: object) -> None:
        self.restore()
