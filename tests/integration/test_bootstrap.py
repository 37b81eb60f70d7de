"""The bootstrap on this (ready) machine, and in a bare Debian container that lacks everything."""

import hashlib
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO, unavailable
from tests.unit.test_bootstrap import BOOTSTRAP, packages

DPKG_STATUS = Path("/var/lib/dpkg/status")
COMMANDS = (
    "mmdebstrap",
    "git",
    "docker",
    "dockerd",
    "docker-registry",
    "docker-compose",
    "cmake",
    "ninja",
    "fincore",
    "make",
    "chromium",
)
DEBIAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _debian_only() -> None:
    if not DPKG_STATUS.is_file():
        unavailable("not a Debian system: the bootstrap only lists packages here")


def test_second_run_on_a_ready_machine_installs_nothing(docker_client) -> None:  # type: ignore[no-untyped-def]
    _debian_only()
    before = hashlib.sha256(DPKG_STATUS.read_bytes()).hexdigest()
    result = subprocess.run([str(BOOTSTRAP)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"bootstrap: ready: all {len(packages())} host packages are installed and the Docker engine answers"
    ]
    assert hashlib.sha256(DPKG_STATUS.read_bytes()).hexdigest() == before


def _owner(path: str) -> str:
    for candidate in (path, str(Path(path).resolve()), path.replace("/usr/", "/", 1)):
        result = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if result.returncode == 0:
            return result.stdout.split(":", 1)[0]
    raise AssertionError(f"no Debian package owns {path}")


def test_every_command_the_project_runs_comes_from_a_listed_package() -> None:
    _debian_only()
    listed = packages()
    for command in COMMANDS:
        path = shutil.which(command, path=DEBIAN_PATH)
        assert path is not None, f"{command} missing after the bootstrap"
        owner = _owner(path)
        assert owner in listed, f"{command} comes from {owner}, which the bootstrap does not list"


# The project's minbase bookworm image has util-linux-extra (fincore) and nothing else listed.
BARE_MISSING = [name for name in packages() if name != "util-linux-extra"]


def _in_bare_debian(image: str, *args: str, user: str = "0") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--user",
            user,
            "-v",
            f"{REPO / 'scripts'}:/src:ro",
            image,
            "sh",
            "/src/bootstrap.sh",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_in_a_bare_debian_names_every_missing_package(runtime_base_image: str) -> None:
    result = _in_bare_debian(runtime_base_image, "--check")
    assert result.returncode == 1, result.stdout + result.stderr
    line = result.stdout.strip()
    assert line.startswith("bootstrap: missing host packages: ")
    missing = line.split(": ", 2)[2].split()
    assert missing == BARE_MISSING


def test_without_root_it_prints_the_one_command_and_stops(runtime_base_image: str) -> None:
    result = _in_bare_debian(runtime_base_image, user="65534")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    missing = " ".join(BARE_MISSING)
    assert lines[-1] == (
        f"bootstrap: run: sudo apt-get update && sudo apt-get install -y --no-install-recommends {missing} "
    )
