"""`image export TARGET FILE` refuses an existing FILE (or sidecar) without --force and a FILE
whose directory does not exist, in one line, before Docker or the key is asked: nothing is
written and no directory is made."""

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.images.archive import check_export_paths, sidecar_path
from tests.conftest import run_cli


def _export(out: Path, *extra: str) -> tuple[int, str]:
    result = run_cli("image", "export", "cpu", str(out), *extra, timeout=120)
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    return result.returncode, result.stderr


def test_an_existing_file_is_refused_without_force(tmp_path: Path) -> None:
    out = tmp_path / "engine.tar"
    out.write_bytes(b"someone's archive")
    code, stderr = _export(out)
    assert code == 2
    assert stderr == f"error: {out} already exists: pass --force to replace it, or choose another file\n"
    assert out.read_bytes() == b"someone's archive" and sorted(tmp_path.iterdir()) == [out]


def test_an_existing_sidecar_is_refused_without_force(tmp_path: Path) -> None:
    out = tmp_path / "engine.tar"
    sidecar_path(out).write_text("{}")
    code, stderr = _export(out)
    assert code == 2 and stderr.startswith(f"error: {sidecar_path(out)} already exists: pass --force")
    assert not out.exists() and sidecar_path(out).read_text() == "{}"


def test_a_missing_directory_is_refused_and_not_made(tmp_path: Path) -> None:
    out = tmp_path / "not" / "there" / "engine.tar"
    code, stderr = _export(out, "--force")
    assert code == 2
    assert stderr == (
        f"error: {out}: the directory {out.parent} does not exist: make it first, or choose another file\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_force_lets_an_existing_file_through_the_check(tmp_path: Path) -> None:
    out = tmp_path / "engine.tar"
    out.write_bytes(b"old")
    check_export_paths(out, force=True)
    check_export_paths(tmp_path / "new.tar", force=False)
    with pytest.raises(ConfigError, match="already exists"):
        check_export_paths(out, force=False)
