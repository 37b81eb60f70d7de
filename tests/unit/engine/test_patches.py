"""The patch series: verified files, series digest, apply, bracket check, dev/export round trip."""

import difflib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from appliance.core.digests import sha256_file
from appliance.core.errors import ApplianceError, IntegrityError
from appliance.engine.lock import load_lock
from appliance.engine.patches import digest_of, selected_patches, series_digest
from appliance.engine.source import SourceTree, fetch_source
from tests.conftest import REPO, run_cli, unavailable

PATCHES = REPO / "patches" / "llama.cpp"
ACTIVE = [
    "0001-llama-moe-trace.patch",
    "0002-demand-mmap.patch",
    "0003-route-aware-prefetch.patch",
    "0005-forced-routes.patch",
]
EXPERIMENTAL = ["0004-expert-cache.patch"]
EXTRA = "0009-extra-notes.patch"  # experimental patch added to a checkout copy (exact format-patch output)
EXTRA_PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: test <test@localhost>
Date: Thu, 1 Jan 2026 00:00:00 +0000
Subject: [PATCH] moe-trace: extra notes

An experimental patch for tests: adds a file next to the tracer.
---
 tools/moe-trace/NOTES.md | 1 +
 1 file changed, 1 insertion(+)
 create mode 100644 tools/moe-trace/NOTES.md

diff --git a/tools/moe-trace/NOTES.md b/tools/moe-trace/NOTES.md
new file mode 100644
index 0000000..bfa6551
--- /dev/null
+++ b/tools/moe-trace/NOTES.md
@@ -0,0 +1 @@
+notes
"""


def checkout_copy(tmp_path: Path) -> Path:
    """The lock and patches of this checkout, copied so a test may change them; returns the lock."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "engine", root / "engine")
    shutil.copytree(PATCHES, root / "patches" / "llama.cpp")
    return root / "engine" / "llama.cpp.lock.json"


def with_experimental(lock_path: Path) -> Path:
    """Add EXTRA as an experimental patch to a checkout copy; returns the lock path."""
    patch = lock_path.parent.parent / "patches" / "llama.cpp" / "experimental" / EXTRA
    patch.write_text(EXTRA_PATCH)
    raw = json.loads(lock_path.read_text())
    raw["patches"]["experimental"].append({"file": EXTRA, "sha256": sha256_file(patch)})
    lock_path.write_text(json.dumps(raw, indent=2) + "\n")
    return lock_path


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, SourceTree]:
    lock = load_lock()
    try:
        return {name: fetch_source(lock, name) for name in sorted(lock.stand_ins)}
    except ApplianceError as exc:
        unavailable(f"stand-in sources not available: {exc}")
        raise


def test_list_shows_every_patch_with_its_pinned_sha256() -> None:
    result = run_cli("patches", "list", "--json", check=True)
    rows = json.loads(result.stdout)
    assert [(r["status"], r["file"]) for r in rows] == [("active", f) for f in ACTIVE] + [
        ("experimental", f) for f in EXPERIMENTAL
    ]
    for row in rows:
        assert row["sha256"] == sha256_file(PATCHES / row["status"] / row["file"])
        assert row["subject"] and not row["subject"].startswith("[PATCH")
    assert "src/llama-mmap.cpp" in rows[1]["touches"]
    assert "tools/CMakeLists.txt" in rows[0]["touches"]


def test_patch_with_one_changed_byte_is_refused(tmp_path: Path) -> None:
    lock_path = checkout_copy(tmp_path)
    victim = lock_path.parent.parent / "patches" / "llama.cpp" / "active" / ACTIVE[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))

    result = run_cli("patches", "list", "--lock", str(lock_path))
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: patch active/{ACTIVE[1]} has sha256 {sha256_file(victim)}")
    assert "the lock pins" in result.stderr

    applied = run_cli(
        "patches",
        "apply",
        "--lock",
        str(lock_path),
        "--source",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
    )
    assert applied.returncode == 3 and "refused" in applied.stderr
    assert not (tmp_path / "out").exists()
    with pytest.raises(
        IntegrityError, match=f"patch active/{re.escape(ACTIVE[1])} has sha256 .* the lock pins"
    ):
        series_digest(load_lock(lock_path))


def test_series_file_must_agree_with_the_lock(tmp_path: Path) -> None:
    lock_path = checkout_copy(tmp_path)
    series = lock_path.parent.parent / "patches" / "llama.cpp" / "series"
    series.write_text(series.read_text().replace(ACTIVE[1] + "\n", ""))
    result = run_cli("patches", "list", "--lock", str(lock_path))
    assert result.returncode == 0  # list reads the lock; the series order matters when applying
    digest = run_cli(
        "patches",
        "apply",
        "--lock",
        str(lock_path),
        "--source",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
    )
    assert digest.returncode == 2
    assert "series lists" in digest.stderr and ACTIVE[1] in digest.stderr


def test_series_digest_covers_order_names_and_experimental_choice(tmp_path: Path) -> None:
    lock = load_lock(with_experimental(checkout_copy(tmp_path)))
    plain = series_digest(lock)
    assert plain == series_digest(lock) == digest_of(selected_patches(lock)) == series_digest(load_lock())
    with_extra = series_digest(lock, ["extra-notes"])
    assert with_extra != plain
    assert series_digest(lock, [EXTRA]) == series_digest(lock, [EXTRA.removesuffix(".patch")]) == with_extra
    assert digest_of(list(reversed(selected_patches(lock)))) != plain
    with pytest.raises(ApplianceError, match="no experimental patch named 'nope'"):
        series_digest(lock, ["nope"])


@pytest.mark.network
def test_apply_writes_a_patched_tree_and_its_series_digest(
    tmp_path: Path, stand_ins: dict[str, SourceTree]
) -> None:
    out = tmp_path / "patched"
    result = run_cli("patches", "apply", "--source", "b10229", "--out", str(out), "--json", check=True)
    info = json.loads(result.stdout)
    assert info["series_digest"] == series_digest(load_lock())
    assert [p["file"] for p in info["patches"]] == ACTIVE
    assert info["source"]["kind"] == "stand-in" and info["source"]["name"] == "b10229"
    source = stand_ins["b10229"].path
    assert "add_subdirectory(moe-trace)" in (out / "tools" / "CMakeLists.txt").read_text()
    assert "add_subdirectory(moe-trace)" not in (source / "tools" / "CMakeLists.txt").read_text()
    assert "LLAMA_MMAP_DEMAND" in (out / "src" / "llama-mmap.cpp").read_text()
    tracer = (out / "tools" / "moe-trace" / "moe-trace.cpp").read_text()
    assert "ffn_moe_topk" in tracer and "MADV_WILLNEED" in tracer
    assert (out / "include" / "llama.h").read_bytes() == (source / "include" / "llama.h").read_bytes()
    record = json.loads((out / ".appliance-series.json").read_text())
    assert record["series_digest"] == info["series_digest"]
    assert record["tree_digest"] == info["tree_digest"]

    again = run_cli("patches", "apply", "--source", "b10229", "--out", str(out))
    assert again.returncode == 1 and "not empty" in again.stderr


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
    table = run_cli("patches", "check", check=True).stdout
    assert "bracket check passed" in table and "src/llama-mmap.cpp" in table


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


@pytest.mark.network
def test_dev_tree_and_export_round_trip(tmp_path: Path, stand_ins: dict[str, SourceTree]) -> None:
    lock_path = with_experimental(checkout_copy(tmp_path))
    lock_before = lock_path.read_bytes()
    dev = tmp_path / "dev"
    run_cli(
        "patches",
        "dev",
        "--lock",
        str(lock_path),
        "--source",
        "b10229",
        "--out",
        str(dev),
        "--with-experimental",
        "extra-notes",
        check=True,
    )
    exported = run_cli("patches", "export", "--lock", str(lock_path), str(dev), check=True).stdout
    assert exported.count("unchanged ") == 5 and "updated" not in exported
    assert lock_path.read_bytes() == lock_before

    # edit the experimental patch's commit, export: only that file and its pin change
    source = dev / "tools" / "moe-trace" / "NOTES.md"
    source.write_text(source.read_text() + "// edited\n")
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@localhost",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@localhost",
    }
    subprocess.run(
        ["git", "commit", "-q", "-a", "--amend", "--no-edit"], cwd=dev, check=True, env={**os.environ, **env}
    )
    exported = run_cli("patches", "export", "--lock", str(lock_path), str(dev), check=True).stdout
    assert f"updated experimental/{EXTRA}" in exported
    assert exported.count("unchanged active/") == 4
    lock = load_lock(lock_path)
    patch = lock_path.parent.parent / "patches" / "llama.cpp" / "experimental" / EXTRA
    assert {e.file: e.sha256 for e in lock.patches["experimental"]}[EXTRA] == sha256_file(patch)
    assert "+// edited" in patch.read_text()
    assert [e.sha256 for e in lock.patches["active"]] == [e.sha256 for e in load_lock().patches["active"]]


def test_move_between_statuses_rewrites_series_and_lock(tmp_path: Path) -> None:
    lock_path = with_experimental(checkout_copy(tmp_path))
    run_cli("patches", "lock", "--lock", str(lock_path), check=True)  # the lock's own formatting
    patches = lock_path.parent.parent / "patches" / "llama.cpp"
    before = (lock_path.read_bytes(), (patches / "series").read_bytes())
    run_cli("patches", "move", "--lock", str(lock_path), "extra-notes", "active", check=True)
    lock = load_lock(lock_path)
    assert [e.file for e in lock.patches["active"]] == [*ACTIVE, EXTRA]
    assert [e.file for e in lock.patches["experimental"]] == EXPERIMENTAL
    assert (patches / "active" / EXTRA).is_file()
    assert not (patches / "experimental" / EXTRA).exists()
    assert [line for line in (patches / "series").read_text().splitlines() if not line.startswith("#")] == [
        *ACTIVE,
        EXTRA,
    ]
    assert series_digest(lock) != series_digest(load_lock())

    run_cli("patches", "move", "--lock", str(lock_path), EXTRA, "experimental", check=True)
    assert (lock_path.read_bytes(), (patches / "series").read_bytes()) == before
