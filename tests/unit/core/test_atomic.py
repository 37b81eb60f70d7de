"""One atomic-write helper: whole or absent, synced, one temporary-name scheme, used everywhere."""

import ast
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.core import atomic
from appliance.core.errors import ApplianceError
from tests.conftest import REPO

TMP_NAME = re.compile(r"^\.out\.json\.[0-9]+\.[A-Za-z0-9_]+\.tmp$")  # .NAME.PID.RANDOM.tmp


def test_writes_exact_bytes_with_umask_permissions(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "out.json"
    atomic.write_json(path, {"b": 1, "a": [1, 2]})
    assert path.read_bytes() == b'{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    atomic.write_json(path, {"b": 1, "a": 2}, sort_keys=False)
    assert path.read_text() == '{\n  "b": 1,\n  "a": 2\n}\n'


def test_mode_is_applied_before_any_byte_is_written(tmp_path: Path) -> None:
    key = tmp_path / "key"
    with atomic.replacing(key, mode=0o600) as handle:
        assert stat.S_IMODE(os.fstat(handle.fileno()).st_mode) == 0o600
        handle.write(b"secret")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.read_bytes() == b"secret"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_bytes(b"old")
    seen = []
    with pytest.raises(RuntimeError, match="disk gone"), atomic.replacing(path) as handle:
        handle.write(b"half")
        seen = [p.name for p in tmp_path.iterdir() if p != path]
        raise RuntimeError("disk gone")
    assert len(seen) == 1 and TMP_NAME.match(seen[0]), seen
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_failed_first_write_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    with pytest.raises(KeyboardInterrupt), atomic.replacing_path(path) as tmp:
        tmp.write_bytes(b"partial")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


# Writes that may stay plain: files inside a directory that is itself renamed into place when
# complete (a local build's .partial directory), logs, and records inside a scratch checkout.
PLAIN_WRITES = {
    "appliance/engine/local_build.py": 2,
    "appliance/engine/patches.py": 1,
    "appliance/engine/patch_dev.py": 2,
    "appliance/cluster/executor.py": 1,  # a trial directory unpacked in staging, renamed whole
    "appliance/images/builders.py": 1,  # the classic builder's Dockerfile, in a scratch context
    "appliance/host/read_ahead.py": 1,  # a sysfs attribute: one write the kernel takes, no file to replace
}


def _is_plain_write(call: ast.Call) -> bool:
    """A Path.write_text/write_bytes not through atomic, or an os/tempfile rename or mkstemp."""
    if not isinstance(call.func, ast.Attribute):
        return False
    name, owner = call.func.attr, call.func.value
    owner_name = owner.id if isinstance(owner, ast.Name) else None
    if name in ("write_text", "write_bytes"):
        return owner_name != "atomic"
    return name in ("replace", "rename", "mkstemp") and owner_name in ("os", "tempfile")


def _plain_writes(path: Path) -> int:
    tree = ast.parse(path.read_text(), str(path))
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_plain_write(node))


def test_files_that_must_be_whole_go_through_core_atomic() -> None:
    found = {}
    for path in sorted((REPO / "appliance").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel != "appliance/core/atomic.py" and (count := _plain_writes(path)):
            found[rel] = count
    assert found == PLAIN_WRITES


def test_a_special_file_is_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ApplianceError, match="is not a regular file"):
        atomic.write_bytes(fifo, b"x")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    stale = tmp_path / f".out.json.{dead}.abc123.tmp"
    alive = tmp_path / f".out.json.{os.getpid()}.def456.tmp"
    stale.write_bytes(b"half")
    alive.write_bytes(b"in progress")
    atomic.write_json(tmp_path / "out.json", {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == [alive.name, "out.json"]
