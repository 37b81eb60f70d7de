"""The filesystem under a path: its kind (statfs) and its free space (statvfs).

A model written for memory-limited trials must live on a disk-backed filesystem: pages of a
file on tmpfs or ramfs are memory that cannot be evicted, so no trial reading it could start
cold, and the memory limit would not mean what it says.
"""

import ctypes
import ctypes.util
import os
from pathlib import Path

from appliance.core.errors import ApplianceError
from appliance.core.units import format_size

TMPFS_MAGIC = 0x01021994
RAMFS_MAGIC = 0x858458F6
VOLATILE = {TMPFS_MAGIC: "tmpfs", RAMFS_MAGIC: "ramfs"}
STATFS_BYTES = 256  # struct statfs is 120 bytes on 64-bit Linux; f_type (a long) comes first

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.statfs.argtypes = (ctypes.c_char_p, ctypes.c_void_p)


def existing_dir(path: Path) -> Path:
    """The nearest existing directory at or above `path`'s parent (what a new file lands in)."""
    here = path.absolute().parent
    while not here.is_dir() and here.parent != here:
        here = here.parent
    return here


def fs_magic(directory: Path) -> int:
    buf = ctypes.create_string_buffer(STATFS_BYTES)
    if _libc.statfs(os.fsencode(directory), buf) != 0:
        err = ctypes.get_errno()
        raise ApplianceError(f"cannot examine the filesystem of {directory}: {os.strerror(err)}")
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def volatile_kind(directory: Path) -> str | None:
    """ "tmpfs" or "ramfs" when `directory` is on one (its pages cannot be evicted), else None."""
    return VOLATILE.get(fs_magic(directory))


def refuse_volatile_model(path: Path) -> None:
    """Refuse a run whose model file is on tmpfs/ramfs: the memory limit and cold starts would
    not mean what they say."""
    kind = volatile_kind(path.resolve().parent)
    if kind is not None:
        raise ApplianceError(
            f"model {path} is on {kind}: its pages cannot be evicted, so no trial could start "
            "cold; move it to a disk-backed directory and pass that as --models"
        )


def refuse_unfit_target(path: Path, need: int, what: str) -> None:
    """Refuse to write `need` bytes at `path` on tmpfs/ramfs or where they do not fit."""
    directory = existing_dir(path)
    kind = volatile_kind(directory)
    if kind is not None:
        raise ApplianceError(
            f"{directory} is on {kind}: its pages cannot be evicted, so no trial could start cold; "
            f"write {what} to a disk-backed directory"
        )
    free = free_bytes(directory)
    if free < need:
        raise ApplianceError(
            f"{directory} has {format_size(free)} ({free} bytes) free; writing {what} takes "
            f"{format_size(need)} ({need} bytes): free space or choose another directory"
        )
