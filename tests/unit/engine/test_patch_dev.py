"""Editing patches (`appliance.engine.patch_dev`): a dev tree with one commit per patch
exported back, and moving a patch between statuses."""

import os
import subprocess
from pathlib import Path

import pytest

from appliance.core.digests import sha256_file
from appliance.engine.lock import load_lock
from appliance.engine.patches import series_digest
from appliance.engine.source import SourceTree
from tests.conftest import run_cli
from tests.unit.engine.test_patches import (
    ACTIVE,
    EXPERIMENTAL,
    EXTRA,
    checkout_copy,
    stand_ins,
    with_experimental,
)

__all__ = ["stand_ins"]  # a fixture


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
    assert exported.count("unchanged ") == 6 and "updated" not in exported
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
    assert exported.count("unchanged active/") == 5
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


def test_lock_re_pins_the_tracks_variants_too(tmp_path: Path) -> None:
    """`patches lock` after a hand edit of a track's variant: its pin follows the file (it did not,
    and the track's series was refused until the lock was edited by hand); the rest of the lock
    is unchanged, and a second run changes nothing."""
    lock_path = checkout_copy(tmp_path)
    run_cli("patches", "lock", "--lock", str(lock_path), check=True)
    before = load_lock(lock_path)
    track = next(iter(before.tracks.values()))
    name = sorted(track.variants)[0]
    variant = lock_path.parent.parent / "patches" / "llama.cpp" / "tracks" / track.name / name
    variant.write_text(variant.read_text() + "\n")
    shown = run_cli("patches", "lock", "--lock", str(lock_path), check=True).stdout
    assert f"tracks/{track.name}/{name} sha256:{sha256_file(variant)}" in shown
    after = load_lock(lock_path)
    assert after.tracks[track.name].variants == {**track.variants, name: sha256_file(variant)}
    assert after.patches == before.patches
    text = lock_path.read_text()
    run_cli("patches", "lock", "--lock", str(lock_path), check=True)
    assert lock_path.read_text() == text
