"""Hostile or mistyped locks: one line naming the file and the line or field, exit 2, nothing
written; a lock with no stand-ins to bracket the pin cannot pass the bracket check."""

import json
from pathlib import Path

import pytest

from appliance.core.paths import default_lock_path
from appliance.engine.lock import load_lock
from tests.conftest import lock_with, run_cli

IMAGE_ID = "sha256:" + "ab" * 32


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))
    }


def refused(path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run a lock-reading verb on path; assert exit 2 with one error line; return it."""
    before = snapshot(path.parent)
    result = run_cli(*args, "--lock", str(path), env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {path}: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert snapshot(path.parent) == before
    return result.stderr.strip().removeprefix(f"error: {path}: ")


@pytest.mark.parametrize(
    ("depth", "problem"),
    [
        (200_000, "larger than 262144 bytes, the most this reader accepts"),
        (100_000, "line 2: nested deeper than 64 levels"),
    ],
)
def test_a_deeply_nested_lock_is_one_line(tmp_path: Path, depth: int, problem: str) -> None:
    path = tmp_path / "lock.json"
    path.write_text('{"schema_version": 1,\n "upstream": ' + "[" * depth + "]" * depth + "}")
    assert refused(path, "engine", "show") == problem


def test_a_lock_with_a_byte_that_is_not_utf8(tmp_path: Path) -> None:
    text = default_lock_path().read_bytes().replace(b'"release": "b10189"', b'"release": "b10\xe9189"')
    path = tmp_path / "lock.json"
    path.write_bytes(text)
    offset = text.index(b"\xe9")
    line = text[:offset].count(b"\n") + 1
    assert refused(path, "engine", "show") == f"line {line}: not UTF-8 (byte 0xe9 at offset {offset})"


def test_a_lock_path_that_is_a_directory_or_a_device(tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    path.mkdir()
    assert refused(path, "engine", "show") == "is a directory, not a file"
    result = run_cli("engine", "show", "--lock", "/dev/zero")
    assert result.returncode == 2
    assert result.stderr == "error: /dev/zero: is not a regular file (a device, pipe or socket)\n"


def test_the_default_lock_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "engine" / "llama.cpp.lock.json").mkdir(parents=True)
    result = run_cli("engine", "show", env={"APPLIANCE_ROOT": str(tmp_path)})
    assert result.returncode == 2
    assert result.stderr == (f"error: {tmp_path}/engine/llama.cpp.lock.json: is a directory, not a file\n")


def test_a_lock_with_a_duplicate_key(tmp_path: Path) -> None:
    text = (
        default_lock_path()
        .read_text()
        .replace('"release": "b10189"', '"release": "b10189",\n    "release": "b10190"')
    )
    path = tmp_path / "lock.json"
    path.write_text(text)
    first = text[: text.index('"release": "b10189"')].count("\n") + 1
    assert (
        refused(path, "engine", "show")
        == f"line {first + 1}: duplicate key 'release' (first at line {first})"
    )


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda r: r["targets"]["cpu"].update(colour="blue"),
            "/targets/cpu/colour: unknown field (allowed: build_base, runtime_base, base_digest, "
            "build_base_digest, cmake_args, cuda)",
        ),
        (lambda r: r.update(comment="x"), "/comment: unknown field"),
        (
            lambda r: r["stand_ins"]["b10229"].update(version="../../x"),
            "/stand_ins/b10229/version: '../../x' is not a package version",
        ),
        (
            lambda r: r["targets"]["cpu"].update(build_base_digest="ab" * 32),
            f"/targets/cpu/build_base_digest: '{'ab' * 32}' is not of the form sha256:<64 hex digits>",
        ),
        (
            lambda r: r["patches"]["active"][0].update(file="../0001.patch"),
            "/patches/active/0/file: '../0001.patch' is not a plain file name inside the patch folder",
        ),
        (
            lambda r: r.update(published_images={"cpu": {"reference": "r@sha256:x", "by": "me"}}),
            "/published_images/cpu/by: unknown field",
        ),
    ],
)
def test_unknown_and_mistyped_fields_are_refused_like_profiles(
    tmp_path: Path,
    edit,  # type: ignore[no-untyped-def]
    problem: str,
) -> None:
    assert refused(lock_with(tmp_path, edit), "engine", "show").startswith(problem)


def test_the_build_base_digest_image_base_writes_is_accepted_and_typed(tmp_path: Path) -> None:
    path = lock_with(
        tmp_path, lambda r: r["targets"]["cpu"].update(build_base_digest=IMAGE_ID, base_digest=IMAGE_ID)
    )
    shown = run_cli("engine", "show", "--json", "--lock", str(path), check=True)
    assert json.loads(shown.stdout)["lock"]["targets"]["cpu"]["build_base_digest"] == IMAGE_ID
    target = load_lock(path).targets["cpu"]
    assert (target.build_base_digest, target.base_digest) == (IMAGE_ID, IMAGE_ID)
    assert load_lock().targets["cpu"].build_base_digest is None


@pytest.mark.parametrize(("keep", "found"), [([], "none"), (["b10229"], "b10229")])
def test_patches_check_without_two_stand_ins_fails_before_fetching(
    tmp_path: Path, keep: list[str], found: str
) -> None:
    path = lock_with(
        tmp_path,
        lambda r: r.update(
            stand_ins={
                k: v for k, v in r["stand_ins"].items() if k in keep or v["relation"] == "current-track"
            }
        ),
    )
    cache = tmp_path / "cache"
    problem = refused(path, "patches", "check", env={"APPLIANCE_CACHE": str(cache)})
    assert problem == (
        "/stand_ins: the bracket check needs two stand-ins, one before and one "
        f"after the pin (found: {found}); add them to the lock"
    )
    assert not cache.exists()
