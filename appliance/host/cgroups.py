"""A container's cgroup accounting, read while the container still exists (v1 and v2).

Docker removes a container's cgroup the moment its last process exits, and cgroup v1 does not
carry a dead child's block I/O counters to its parent. The runner therefore keeps the
container alive after the engine exits and reads everything here before stopping it.

Block I/O on v1 is only counted per cgroup when a throttle rule exists on the device, so the
runner adds a read-bps rule with a rate no disk reaches (`BLKIO_UNLIMITED_BPS`) on the device
that holds the model; `block_device_for` finds that device.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.host.read_ahead import current_kb

CGROUP_ROOT = Path("/sys/fs/cgroup")
BLKIO_UNLIMITED_BPS = 1 << 40  # 1 TiB/s: turns v1 blkio accounting on without throttling


@dataclass(frozen=True)
class BlockDevice:
    major: int
    minor: int
    node: str  # /dev path Docker accepts in device_read_bps
    # the kernel's read-ahead for the device: also the window a page fault of a plain mmap reads
    # around itself, so it sets how much a thrashing baseline reads (8192 on this project's VM)
    read_ahead_kb: int | None = None

    @property
    def key(self) -> str:
        return f"{self.major}:{self.minor}"


def cgroup_version(root: Path = CGROUP_ROOT) -> int:
    return 2 if (root / "cgroup.controllers").exists() else 1


def block_device_for(path: Path) -> BlockDevice | None:
    """The whole-disk block device holding a file, or None (tmpfs, overlay without a disk)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    sysdir = Path(f"/sys/dev/block/{major}:{minor}")
    if not sysdir.exists():
        return None
    if (sysdir / "partition").exists():  # throttle rules apply to whole disks
        sysdir = sysdir.resolve().parent
        major, minor = (int(x) for x in (sysdir / "dev").read_text().split(":"))
    devname = _uevent(sysdir).get("DEVNAME")
    if devname is None or not Path("/dev", devname).exists():
        return None
    return BlockDevice(major, minor, f"/dev/{devname}", current_kb(f"{major}:{minor}"))


def _uevent(sysdir: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (sysdir / "uevent").read_text().splitlines())
    return {k: v for k, v in pairs}


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (FileNotFoundError, PermissionError):
        return None
    return None if text == "max" else int(text)


def _read_keyed(path: Path) -> dict[str, int]:
    """Files of "name value" lines (memory.stat, memory.events, oom_control)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    out: dict[str, int] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _cgroup_paths(pid: int, proc: Path) -> dict[str, str]:
    """controller -> path relative to its hierarchy, from /proc/PID/cgroup ("" for v2)."""
    paths: dict[str, str] = {}
    for line in (proc / str(pid) / "cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = rel
    return paths


def _v1_block_reads(blkio: Path) -> dict[str, int]:
    reads: dict[str, int] = {}
    try:
        lines = (blkio / "blkio.throttle.io_service_bytes_recursive").read_text().splitlines()
    except FileNotFoundError:
        return reads
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[1] == "Read":
            reads[parts[0]] = reads.get(parts[0], 0) + int(parts[2])
    return reads


def _v2_block_reads(group: Path) -> dict[str, int]:
    reads: dict[str, int] = {}
    try:
        lines = (group / "io.stat").read_text().splitlines()
    except FileNotFoundError:
        return reads
    for line in lines:
        device, *fields = line.split()
        values = dict(field.split("=", 1) for field in fields)
        reads[device] = int(values.get("rbytes", 0))
    return reads


def read_accounting(pid: int, root: Path = CGROUP_ROOT, proc: Path = Path("/proc")) -> dict[str, Any]:
    """Memory, faults, OOM kills and block reads of the cgroup that process `pid` is in.

    page_cache_bytes and anon_bytes are the state at reading time (after the engine exited
    but before its cgroup was torn down); peak_bytes is the high-water mark of the whole
    charge (anonymous plus page cache), the figure the memory limit bounds.
    """
    paths = _cgroup_paths(pid, proc)
    if cgroup_version(root) == 2:
        group = root / paths[""].lstrip("/")
        stat = _read_keyed(group / "memory.stat")
        events = _read_keyed(group / "memory.events")
        reads = _v2_block_reads(group)
        return {
            "cgroup_version": 2,
            "limit_bytes": _read_int(group / "memory.max"),
            "peak_bytes": _read_int(group / "memory.peak"),
            "swap_peak_bytes": _read_int(group / "memory.swap.peak"),
            "page_cache_bytes": stat.get("file"),
            "anon_bytes": stat.get("anon"),
            "mapped_file_bytes": stat.get("file_mapped"),
            "major_faults": stat.get("pgmajfault"),
            "minor_faults": _minor(stat.get("pgfault"), stat.get("pgmajfault")),
            "oom_kills": events.get("oom_kill", 0),
            "block_read_bytes": reads,
        }
    memory = root / "memory" / paths["memory"].lstrip("/")
    blkio = root / "blkio" / paths["blkio"].lstrip("/")
    stat = _read_keyed(memory / "memory.stat")
    return {
        "cgroup_version": 1,
        "limit_bytes": _read_int(memory / "memory.limit_in_bytes"),
        "peak_bytes": _read_int(memory / "memory.max_usage_in_bytes"),
        "memsw_peak_bytes": _read_int(memory / "memory.memsw.max_usage_in_bytes"),
        "page_cache_bytes": stat.get("total_cache"),
        "anon_bytes": stat.get("total_rss"),
        "mapped_file_bytes": stat.get("total_mapped_file"),
        "major_faults": stat.get("total_pgmajfault"),
        "minor_faults": _minor(stat.get("total_pgfault"), stat.get("total_pgmajfault")),
        "oom_kills": _read_keyed(memory / "memory.oom_control").get("oom_kill", 0),
        "block_read_bytes": _v1_block_reads(blkio),
    }


def _minor(faults: int | None, major: int | None) -> int | None:
    return None if faults is None or major is None else faults - major
