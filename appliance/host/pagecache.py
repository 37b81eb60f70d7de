"""The host page cache and one file: evict it, and count how much of it is resident.

Page cache filled by another cgroup is not charged to a container, so a cold trial needs the
model's pages gone before it starts. Eviction is `posix_fadvise(POSIX_FADV_DONTNEED)` (after a
`fdatasync`, because dirty pages are not dropped); residency is `mincore` on a read-only
mapping through ctypes, which maps without touching (and so without reading) any page.
"""

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from appliance.core.errors import ApplianceError

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
MAP_FAILED = ctypes.c_void_p(-1).value
_LOW_BIT = bytes(b & 1 for b in range(256))  # mincore: bit 0 of each byte = resident


@dataclass(frozen=True)
class Residency:
    resident_pages: int
    total_pages: int
    page_size: int

    @property
    def resident_bytes(self) -> int:
        return self.resident_pages * self.page_size

    def as_dict(self) -> dict[str, int]:
        return {
            "resident_pages": self.resident_pages,
            "total_pages": self.total_pages,
            "page_size": self.page_size,
            "resident_bytes": self.resident_bytes,
        }


def residency(path: Path) -> Residency:
    """How many of the file's pages are in the page cache now (mincore; reads nothing)."""
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must never block
    try:
        length = os.fstat(fd).st_size
        pages = (length + page - 1) // page
        if length == 0:
            return Residency(0, 0, page)
        addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, MAP_FAILED):
            raise ApplianceError(f"cannot map {path} to measure residency: {os.strerror(ctypes.get_errno())}")
        try:
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, length, vec) != 0:
                raise ApplianceError(f"mincore failed on {path}: {os.strerror(ctypes.get_errno())}")
            resident = pages - bytes(vec).translate(_LOW_BIT).count(0)
        finally:
            _libc.munmap(addr, length)
    finally:
        os.close(fd)
    return Residency(resident, pages, page)


def evict(path: Path) -> None:
    """Ask the kernel to drop the file's clean pages from the page cache; writes nothing."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must never block
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def evict_and_measure(path: Path, attempts: int = 3) -> Residency:
    """Evict, then measure; retries a few times when pages were still being written back."""
    measured = residency(path)
    for _ in range(attempts):
        evict(path)
        measured = residency(path)
        if measured.resident_pages == 0:
            break
    return measured
