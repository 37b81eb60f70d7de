"""The installed package finds the checkout's files through options, variables or the checkout."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.core import paths
from appliance.engine.lock import load_lock
from appliance.engine.patches import patches_dir
from appliance.evidence.finding import load_findings
from appliance.runs.profile import builtin_profiles
from tests.conftest import REPO, run_cli


def test_defaults_are_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (paths.ROOT_ENV, paths.LOCK_ENV, paths.PATCHES_ENV, paths.EVIDENCE_ENV):
        monkeypatch.delenv(name, raising=False)
    assert paths.repo_root() == REPO.resolve()
    assert paths.default_lock_path() == REPO.resolve() / "engine" / "llama.cpp.lock.json"
    assert paths.evidence_dir() == REPO.resolve() / "evidence"
    assert patches_dir(load_lock()) == REPO.resolve() / "patches" / "llama.cpp"


def test_each_variable_moves_one_thing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(paths.LOCK_ENV, str(tmp_path / "lock.json"))
    monkeypatch.setenv(paths.EVIDENCE_ENV, str(tmp_path / "ev"))
    monkeypatch.setenv(paths.PATCHES_ENV, str(tmp_path / "p"))
    assert paths.default_lock_path() == tmp_path / "lock.json"
    assert paths.evidence_dir() == tmp_path / "ev"
    assert paths.default_patches_dir() == tmp_path / "p"
    assert paths.repo_root() == REPO.resolve()
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    assert paths.repo_root() == tmp_path


def test_evidence_is_read_from_the_directory_the_variable_names(tmp_path: Path) -> None:
    """The CLI reads the findings APPLIANCE_EVIDENCE names, not the checkout's."""
    ev = tmp_path / "ev"
    ev.mkdir()
    source = sorted((REPO / "evidence").glob("*.json"))[0]
    shutil.copy(source, ev / source.name)
    assert [f.id for f in load_findings(ev)] == [source.stem]
    result = run_cli("evidence", "list", "--json", env={paths.EVIDENCE_ENV: str(ev)})
    assert result.returncode == 0, result.stderr
    assert [item["id"] for item in json.loads(result.stdout)] == [source.stem]


def test_a_copy_of_the_package_outside_any_checkout_works_from_variables(tmp_path: Path) -> None:
    """The package as a wheel installs it: profiles come with it, the lock from APPLIANCE_LOCK."""
    site, elsewhere = tmp_path / "site", tmp_path / "work"
    shutil.copytree(REPO / "appliance", site / "appliance", ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env.update(PYTHONPATH=str(site), APPLIANCE_LOCK=str(REPO / "engine" / "llama.cpp.lock.json"))
    probe = (
        "from appliance.core import paths; from appliance.runs.profile import "
        "builtin_profiles, load_profile; print(paths.repo_root()); "
        "print(','.join(builtin_profiles())); print(load_profile('tiny-oversub').name)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        str(elsewhere),
        ",".join(builtin_profiles()),  # the same profiles as from the checkout
        "tiny-oversub",
    ]
    shown = subprocess.run(
        [sys.executable, "-m", "appliance", "engine", "show", "--json"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["digest"] == load_lock().digest
    env.pop("APPLIANCE_LOCK")
    missing = subprocess.run(
        [sys.executable, "-m", "appliance", "engine", "show"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2
    assert "lock file not found" in missing.stderr and "--lock" in missing.stderr
