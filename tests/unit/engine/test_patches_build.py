"""Local engine builds: the build key and the incremental source sync (no compiler needed)."""

import os
from pathlib import Path

from appliance.engine.local_build import build_identity, build_key, cmake_args, sync_tree
from appliance.engine.lock import load_lock
from appliance.engine.source import SourceTree
from tests.unit.engine.test_patches import checkout_copy, with_experimental


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_sync_touches_only_changed_files(tmp_path: Path) -> None:
    dest = tree(tmp_path / "dest", {"a.c": "same", "b.c": "old", "gone.c": "x", "d/e.h": "same"})
    old = 1_000_000_000
    for path in dest.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))
    new = tree(tmp_path / "new", {"a.c": "same", "b.c": "new", "c.c": "added", "d/e.h": "same"})

    assert sync_tree(new, dest) == 3  # b.c rewritten, c.c added, gone.c removed
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "a.c",
        "b.c",
        "c.c",
        "d/e.h",
    ]
    assert (dest / "b.c").read_text() == "new"
    assert os.stat(dest / "a.c").st_mtime == old and os.stat(dest / "d/e.h").st_mtime == old
    assert os.stat(dest / "b.c").st_mtime > old  # ninja sees the change
    assert sync_tree(new, dest) == 0


def source(kind: str, name: str, release: str, digest: str = "0" * 64) -> SourceTree:
    return SourceTree(
        Path("/nonexistent"),
        {
            "kind": kind,
            "name": name,
            "upstream_release": release,
            "upstream_commit": "b2f221684fcd898e947a121baeda80f345da3e6b",
            "tree_digest": digest,
        },
    )


def test_build_identity_and_key(tmp_path: Path) -> None:
    lock = load_lock()
    assert build_identity(source("stand-in", "b10068", "b10068")) == (10068, "stand-in-b10068")
    assert build_identity(source("canonical", "canonical", "b10189")) == (10189, "b2f221684fcd")
    assert build_identity(source("local", "tree", "")) == (0, "local")
    args = cmake_args(lock, source("stand-in", "b10229", "b10229"))
    assert "-DGGML_STATIC=ON" in args and "-DLLAMA_BUILD_NUMBER=10229" in args
    assert all(a in args for a in lock.target("cpu").cmake_args)

    s = source("stand-in", "b10229", "b10229")
    key = build_key(lock, s)
    assert key == build_key(lock, s)
    assert key != build_key(load_lock(with_experimental(checkout_copy(tmp_path))), s, ["extra-notes"])
    assert key != build_key(lock, source("stand-in", "b10229", "b10229", "1" * 64))
