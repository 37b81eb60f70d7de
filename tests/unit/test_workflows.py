"""The GitHub workflows pass actionlint and zizmor (as `make lint` runs them), every action is
pinned by commit, and the release workflow publishes through the script the tests run."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
RELEASE = REPO / ".github" / "workflows" / "release.yml"
PINNED_USES = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def tool(name: str) -> str:
    """The linter installed beside this interpreter (the test extras install both)."""
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[test]'"
    return found


def actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("actionlint"), "-no-color", *map(str, paths)], capture_output=True, text=True, cwd=REPO
    )


def zizmor(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("zizmor"), "--offline", "--persona", "pedantic", "--no-progress", *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_there_is_a_release_workflow() -> None:
    assert RELEASE in WORKFLOWS


def test_actionlint_finds_nothing() -> None:
    assert shutil.which("shellcheck"), (
        "shellcheck is a bootstrap package: actionlint checks run: steps with it"
    )
    result = actionlint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_nothing_even_pedantic() -> None:
    result = zizmor(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr


def test_both_linters_fail_a_workflow_with_an_injection_and_a_tag_pin(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: issues\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - uses: actions/checkout@v4\n"
        "      - run: echo ${{ github.event.issue.title }} $undefined_var\n"
    )
    assert actionlint(bad).returncode != 0
    audited = zizmor(bad)
    assert audited.returncode != 0
    assert "template-injection" in audited.stdout and "unpinned-uses" in audited.stdout


def test_every_action_is_pinned_by_commit() -> None:
    for path in WORKFLOWS:
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            for step in job.get("steps", []):
                if "uses" in step:
                    assert PINNED_USES.match(step["uses"]), f"{path.name}: {step['uses']} is not pinned"


@pytest.mark.parametrize("target", ["cpu", "sm89", "sm120"])
def test_the_release_publishes_every_target_through_the_tested_script(target: str) -> None:
    steps = yaml.safe_load(RELEASE.read_text())["jobs"]["publish"]["steps"]
    scripts = [step["run"] for step in steps if "scripts/release-publish.sh" in step.get("run", "")]
    assert len(scripts) == 1
    assert re.search(rf"release-publish\.sh .*\b{target}\b", scripts[0])
    assert "docker build" not in RELEASE.read_text()  # no second recipe
