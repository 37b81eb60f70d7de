"""A build workspace copied or moved to another path (a copied appliance cache) is configured
afresh instead of failing: CMake refuses a CMakeCache.txt made in another directory."""

import shutil
import subprocess
from pathlib import Path

from appliance.engine.local_build import reset_moved_build


def _configure(workspace: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["cmake", "-S", "src", "-B", "build", "-G", "Ninja"],
        cwd=workspace,
        capture_output=True,
        text=True,
    )


def _workspace(root: Path) -> Path:
    workspace = root / "work-0123456789abcdef"
    (workspace / "src").mkdir(parents=True)
    project = "cmake_minimum_required(VERSION 3.14)\nproject(moved NONE)\n"
    (workspace / "src" / "CMakeLists.txt").write_text(project)
    assert _configure(workspace).returncode == 0
    return workspace


def test_a_workspace_configured_in_place_is_kept(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    assert reset_moved_build(workspace) is False
    assert (workspace / "build" / "CMakeCache.txt").is_file()


def test_a_copied_workspace_is_configured_afresh(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "work-0123456789abcdef"
    shutil.copytree(_workspace(tmp_path / "first"), copy)
    refused = _configure(copy)
    assert refused.returncode != 0 and "is different than the directory" in refused.stderr
    assert reset_moved_build(copy) is True
    assert not (copy / "build").exists()
    assert _configure(copy).returncode == 0
    assert reset_moved_build(copy) is False


def test_a_workspace_never_configured_has_nothing_to_reset(tmp_path: Path) -> None:
    (tmp_path / "work" / "src").mkdir(parents=True)
    assert reset_moved_build(tmp_path / "work") is False
