"""The lock's tracks: the canonical one (the pin and the stand-ins that bracket it) and the
current one (b11549, xllamacpp 2026.10.11549), whose series replaces the patches whose upstream
context moved by the variants under patches/llama.cpp/tracks/current/."""

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.core.errors import ConfigError, IntegrityError
from appliance.engine.lock import CANONICAL_TRACK, load_lock
from appliance.engine.patches import active_series, on_track, patches_dir
from tests.conftest import REPO, run_cli

VARIANTS = ["0001-llama-moe-trace.patch", "0002-demand-mmap.patch"]


def lock_copy(tmp_path: Path, change: Any) -> Path:
    raw = json.loads((REPO / "engine" / "llama.cpp.lock.json").read_text())
    change(raw)
    path = tmp_path / "llama.cpp.lock.json"
    path.write_text(json.dumps(raw))
    return path


def test_the_current_track_is_b11549_and_outside_the_bracket() -> None:
    lock = load_lock()
    assert sorted(lock.bracket_stand_ins) == ["b10068", "b10229"]
    track = lock.tracks["current"]
    assert (track.release, track.stand_in, sorted(track.variants)) == ("b11549", "b11549", VARIANTS)
    assert lock.stand_ins["b11549"].version == "2026.10.11549"
    assert lock.track_of_source("b11549") == "current"
    assert lock.track_of_source("b10229") == lock.track_of_source(None) == CANONICAL_TRACK


def test_on_the_current_track_only_the_variants_change() -> None:
    lock = load_lock()
    active = active_series(lock)
    current = on_track(lock, active, "current")
    assert [p.file for p in current] == [p.file for p in active]
    for canonical, variant in zip(active, current, strict=True):
        if canonical.file in VARIANTS:
            assert variant.path == patches_dir(lock) / "tracks" / "current" / canonical.file
            assert variant.sha256 != canonical.sha256 and variant.status == canonical.status
        else:
            assert variant == canonical
    assert on_track(lock, active, CANONICAL_TRACK) == active


def test_a_variant_whose_bytes_differ_from_the_lock_is_refused(tmp_path: Path) -> None:
    path = lock_copy(tmp_path, lambda raw: raw["tracks"]["current"]["variants"][0].update(sha256="0" * 64))
    with pytest.raises(
        IntegrityError, match="variant of 0001-llama-moe-trace.patch has sha256 .* the lock pins 0000"
    ):
        on_track(load_lock(path), active_series(load_lock(path)), "current")


def test_an_unknown_track_is_one_line() -> None:
    with pytest.raises(ConfigError, match="unknown track 'nightly': the lock names canonical, current"):
        load_lock().track("nightly")


def test_a_track_built_from_a_bracket_stand_in_is_refused(tmp_path: Path) -> None:
    path = lock_copy(tmp_path, lambda raw: raw["tracks"]["current"].update(stand_in="b10229"))
    with pytest.raises(ConfigError, match="/tracks/current: .*'b10229' is not one"):
        load_lock(path)


def test_an_image_of_the_current_track_is_refused_before_docker_is_asked() -> None:
    result = run_cli("image", "build", "--target", "cpu", "--source", "b11549")
    assert result.returncode == 2
    assert result.stderr.startswith("error: source b11549 is the current track's")
    assert "appliance engine build --local --source b11549" in result.stderr
    assert result.stderr.count("\n") == 1


def test_engine_show_names_both_tracks() -> None:
    shown = run_cli("engine", "show", check=True).stdout
    assert "canonical, b10068, b10229" in shown and "current-track" in shown
    assert "0002-demand-mmap.patch" in shown


@pytest.mark.network
def test_the_current_tracks_patched_tree_records_its_track_and_variants(tmp_path: Path) -> None:
    out = tmp_path / "patched"
    result = run_cli("patches", "apply", "--source", "b11549", "--out", str(out), "--json", check=True)
    info = json.loads(result.stdout)
    lock = load_lock()
    assert info["source"]["name"] == "b11549"
    pinned = {p.file: p.sha256 for p in on_track(lock, active_series(lock), "current")}
    assert {p["file"]: p["sha256"] for p in info["patches"]} == pinned
    record = json.loads((out / ".appliance-series.json").read_text())
    assert record["track"] == "current"
    mmap = (out / "src" / "llama-mmap.cpp").read_text()
    assert "LLAMA_MMAP_DEMAND" in mmap and "lazy_ranges" in mmap  # the variant, in upstream's new code
    assert "add_subdirectory(moe-trace)" in (out / "tools" / "CMakeLists.txt").read_text()
