"""The bootstrap is the one place that knows the host packages; make and CI go through it."""

import subprocess

from tests.conftest import REPO

BOOTSTRAP = REPO / "scripts" / "bootstrap.sh"


def packages() -> dict[str, str]:
    result = subprocess.run([str(BOOTSTRAP), "--packages"], capture_output=True, text=True, check=True)
    return dict(line.split(": ", 1) for line in result.stdout.splitlines())


def test_every_package_says_why() -> None:
    listed = packages()
    assert len(listed) >= 10
    assert all(why.strip() for why in listed.values())


def test_package_list_names_what_the_code_runs() -> None:
    from appliance.images.base import mmdebstrap_command

    listed = packages()
    assert mmdebstrap_command("runtime", REPO / "x")[0] in listed
    for needed in (
        "docker.io",
        "git",
        "python3-venv",
        "make",
        "cmake",
        "ninja-build",
        "build-essential",
        "docker-registry",
        "docker-compose",
        "util-linux-extra",
        "chromium",
    ):
        assert needed in listed, needed


def test_ci_installs_nothing_itself() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "scripts/bootstrap.sh" in ci
    assert "apt-get" not in ci and "dockerd" not in ci


def _dry_run(goal: str) -> list[str]:
    result = subprocess.run(["make", "-n", "-C", str(REPO), goal], capture_output=True, text=True, check=True)
    return [line for line in result.stdout.splitlines() if not line.startswith("make")]


def test_make_demo_and_test_bootstrap_first() -> None:
    for goal in ("demo", "test"):
        lines = _dry_run(goal)
        assert lines[0] == "scripts/bootstrap.sh", (goal, lines)


def test_unknown_option_is_refused() -> None:
    result = subprocess.run([str(BOOTSTRAP), "--frobnicate"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == "bootstrap: unknown option --frobnicate (see --help)"
