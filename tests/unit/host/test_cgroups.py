"""Parsing of cgroup v1 and v2 accounting files, on trees laid out as the kernel writes them
(this machine runs v1, so the live v2 path is only exercised on users' machines)."""

import os
from pathlib import Path

from appliance.host.cgroups import block_device_for, read_accounting

V2_STAT = """anon 52428800
file 209715200
kernel 1048576
file_mapped 104857600
pgfault 120000
pgmajfault 3456
"""
V2_IO = """254:0 rbytes=734003200 wbytes=4096 rios=5000 wios=1 dbytes=0 dios=0
7:1 rbytes=1024 wbytes=0 rios=1 wios=0 dbytes=0 dios=0
"""


def _proc(tmp_path: Path, content: str) -> Path:
    (tmp_path / "proc" / "4242").mkdir(parents=True)
    (tmp_path / "proc" / "4242" / "cgroup").write_text(content)
    return tmp_path / "proc"


def test_v2_accounting(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    group = root / "system.slice" / "docker-abc.scope"
    group.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    files = {
        "memory.max": "268435456\n",
        "memory.peak": "268431360\n",
        "memory.swap.peak": "0\n",
        "memory.stat": V2_STAT,
        "io.stat": V2_IO,
        "memory.events": "low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\n",
    }
    for name, text in files.items():
        (group / name).write_text(text)
    proc = _proc(tmp_path, "0::/system.slice/docker-abc.scope\n")
    got = read_accounting(4242, root=root, proc=proc)
    assert got == {
        "cgroup_version": 2,
        "limit_bytes": 268435456,
        "peak_bytes": 268431360,
        "swap_peak_bytes": 0,
        "page_cache_bytes": 209715200,
        "anon_bytes": 52428800,
        "mapped_file_bytes": 104857600,
        "major_faults": 3456,
        "minor_faults": 120000 - 3456,
        "oom_kills": 1,
        "block_read_bytes": {"254:0": 734003200, "7:1": 1024},
    }


def test_v1_accounting_uses_hierarchical_totals_and_throttle_bytes(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    memory = root / "memory" / "docker" / "abc"
    blkio = root / "blkio" / "docker" / "abc"
    memory.mkdir(parents=True)
    blkio.mkdir(parents=True)
    (memory / "memory.limit_in_bytes").write_text("67108864\n")
    (memory / "memory.max_usage_in_bytes").write_text("66940928\n")
    (memory / "memory.memsw.max_usage_in_bytes").write_text("66940928\n")
    (memory / "memory.stat").write_text(
        "cache 5\nrss 6\ntotal_cache 65126400\ntotal_rss 98304\n"
        "total_mapped_file 57344\ntotal_pgfault 1662\n"
        "total_pgmajfault 2\n"
    )
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    (blkio / "blkio.throttle.io_service_bytes_recursive").write_text(
        "254:0 Read 100761600\n254:0 Write 0\n254:0 Sync 100761600\n254:0 Total 100761600\nTotal 100761600\n"
    )
    proc = _proc(tmp_path, "12:blkio:/docker/abc\n8:memory:/docker/abc\n1:name=systemd:/x\n")
    got = read_accounting(4242, root=root, proc=proc)
    assert got["peak_bytes"] == 66940928 and got["limit_bytes"] == 67108864
    assert (got["page_cache_bytes"], got["anon_bytes"]) == (65126400, 98304)
    assert (got["major_faults"], got["minor_faults"], got["oom_kills"]) == (2, 1660, 0)
    assert got["block_read_bytes"] == {"254:0": 100761600}


def test_the_model_device_is_a_whole_disk_node(tmp_path: Path) -> None:
    device = block_device_for(tmp_path)
    if device is None:  # tmpfs or overlay without a disk: nothing to count on
        assert os.major(os.stat(tmp_path).st_dev) == 0
        return
    assert Path(device.node).exists()
    assert not Path(f"/sys/dev/block/{device.key}/partition").exists()
    # the disk's read-ahead, as the kernel reports it (a page fault's window in a plain mmap)
    queue = Path(f"/sys/dev/block/{device.key}/queue/read_ahead_kb")
    assert device.read_ahead_kb == int(queue.read_text())
