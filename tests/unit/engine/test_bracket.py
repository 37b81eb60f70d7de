"""The bracket check (`appliance.engine.bracket`, `appliance patches check`): the patch
series applies to both stand-ins and touches only files identical in both."""

import difflib
import json
from pathlib import Path

import pytest

from appliance.core.digests import sha256_file
from appliance.engine.source import SourceTree
from tests.conftest import run_cli
from tests.unit.engine.test_patches import ACTIVE, EXPERIMENTAL, checkout_copy, stand_ins

__all__ = ["stand_ins"]  # a fixture


@pytest.mark.network
def test_bracket_check_passes_and_reports_every_touched_file(stand_ins: dict[str, SourceTree]) -> None:
    result = run_cli("patches", "check", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0, result.stderr
    assert report["ok"] and report["stand_ins"] == ["b10068", "b10229"]
    assert [c["file"] for c in report["active"]] == ACTIVE
    assert [c["file"] for c in report["experimental"]] == EXPERIMENTAL
    assert all(c["ok"] for c in report["experimental"])
    states = {f["path"]: f["state"] for c in report["active"] for f in c["files"]}
    assert states == {
        "tools/CMakeLists.txt": "identical",
        "tools/moe-trace/CMakeLists.txt": "new in both",
        "tools/moe-trace/README.md": "new in both",
        "tools/moe-trace/moe-trace.cpp": "new in both",
        "tools/moe-trace/forced-routes.h": "new in both",
        "src/llama-mmap.cpp": "identical",
    }
    for check in report["active"]:
        assert check["applies"] == {"b10068": True, "b10229": True}
    for rel in ("tools/CMakeLists.txt", "src/llama-mmap.cpp"):  # the check's claim, verified here
        assert (stand_ins["b10068"].path / rel).read_bytes() == (stand_ins["b10229"].path / rel).read_bytes()
    (track,) = report["tracks"]
    assert (track["track"], track["stand_in"], track["compared_with"]) == ("current", "b11549", "b10229")
    assert track["ok"] and track["variants"] == ["0001-llama-moe-trace.patch", "0002-demand-mmap.patch"]
    assert [c["file"] for c in track["active"]] == ACTIVE
    moved = {
        f["path"]
        for c in track["active"] + track["experimental"]
        for f in c["files"]
        if f["state"] == "differs"
    }
    assert moved == {"tools/CMakeLists.txt", "src/llama-mmap.cpp"}  # why those two have variants
    table = run_cli("patches", "check", check=True).stdout
    assert "bracket check passed" in table and "src/llama-mmap.cpp" in table
    assert "track current (b11549): the series applies" in table


def _patch_adding_a_line(tree: Path, rel: str, subject: str) -> str:
    old = (tree / rel).read_text().splitlines(keepends=True)
    new = old[:1] + ["// appliance test line\n"] + old[1:]
    diff = "".join(difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}", n=3))
    return (
        f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: test <test@localhost>\nSubject: [PATCH] {subject}\n\n{subject}\n---\n"
        f"diff --git a/{rel} b/{rel}\n{diff}"
    )


@pytest.mark.network
def test_bracket_check_fails_on_a_file_that_differs_between_stand_ins(
    tmp_path: Path, stand_ins: dict[str, SourceTree]
) -> None:
    rel = "include/llama.h"
    assert (stand_ins["b10068"].path / rel).read_bytes() != (stand_ins["b10229"].path / rel).read_bytes()
    lock_path = checkout_copy(tmp_path)
    patches = lock_path.parent.parent / "patches" / "llama.cpp"
    name = "0009-touch-llama-h.patch"
    text = _patch_adding_a_line(stand_ins["b10229"].path, rel, "touch llama.h")
    (patches / "active" / name).write_text(text)
    (patches / "series").write_text((patches / "series").read_text() + name + "\n")
    raw = json.loads(lock_path.read_text())
    raw["patches"]["active"].append({"file": name, "sha256": sha256_file(patches / "active" / name)})
    lock_path.write_text(json.dumps(raw, indent=2))

    result = run_cli("patches", "check", "--json", "--lock", str(lock_path))
    assert result.returncode == 1
    assert result.stderr.startswith("error: bracket check failed")
    report = json.loads(result.stdout)
    bad = report["active"][-1]
    assert bad["file"] == name and not bad["ok"] and not report["ok"]
    assert bad["applies"] == {"b10068": True, "b10229": True}
    assert bad["files"] == [{"path": rel, "state": "differs", "ok": False}]
    assert all(c["ok"] for c in report["active"][:-1])
