"""The patch series: verified files, series digest, apply (its bracket check: test_bracket.py;
the dev/export round trip: test_patch_dev.py)."""

import json
import re
import shutil
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
    "0006-prefill-readers.patch",
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
