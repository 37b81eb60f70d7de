"""Arguments checked at the edge: out-of-range numbers and unwritable or special output paths
are refused in one line before any expensive work; SIGTERM cleans up like Ctrl-C; the Docker
endpoint tried is named when the engine is unreachable."""

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/appliance-test.sock"}


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_run_repeats_beyond_the_maximum_is_refused(tmp_path: Path) -> None:
    result = run_cli("run", "tiny-oversub", "--models", str(tmp_path), "--dry-run", "--repeats", "100000000")
    message = _one_line(result, 2)
    assert "Invalid value for '--repeats': 100000000 is not in the range 1<=x<=1000" in message


@pytest.mark.parametrize("out", ["/proc/appliance-x", "/sys/appliance-x"])
def test_run_out_unwritable_is_refused_before_docker(out: str, tmp_path: Path) -> None:
    result = run_cli("run", "tiny-oversub", "--models", str(tmp_path), "--out", out, env=NO_DOCKER)
    message = _one_line(result, 2)
    assert f"Invalid value for '--out': '{out}' cannot be written" in message
    assert "Docker" not in message and not Path(out).exists()


def test_run_out_read_only_directory_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        ro = Path("/proc/self")  # root writes through mode bits; a kernel directory it cannot
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
    result = run_cli(
        "run", "tiny-oversub", "--models", str(tmp_path), "--out", str(ro / "run"), env=NO_DOCKER
    )
    assert "cannot be written" in _one_line(result, 2)


def special_files(tmp_path: Path) -> list[Path]:
    """A fifo, and a copy of /dev/full's device node where root may make one: made in tmp_path,
    so a regression replaces a scratch node, never the machine's own /dev entries."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    made = [fifo]
    if os.geteuid() == 0:
        node = tmp_path / "full"
        os.mknod(node, stat.S_IFCHR | 0o666, os.stat("/dev/full").st_rdev)
        made.append(node)
    return made


def test_model_synth_never_replaces_a_special_file(tmp_path: Path) -> None:
    for special in special_files(tmp_path):
        before = os.lstat(special)
        result = run_cli(
            "model",
            "synth",
            str(special),
            "--arch",
            "qwen3moe",
            "--size",
            "8MiB",
            "--experts",
            "8",
            "--used",
            "2",
            "--layers",
            "2",
        )
        assert "is a special file, not a regular file" in _one_line(result, 2)
        after = os.lstat(special)
        assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode)
        assert after.st_ino == before.st_ino and after.st_rdev == before.st_rdev


def test_model_synth_refuses_a_symlink_as_out(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "m.gguf"
    link.symlink_to(target)
    result = run_cli(
        "model",
        "synth",
        str(link),
        "--arch",
        "qwen3moe",
        "--size",
        "8MiB",
        "--experts",
        "8",
        "--used",
        "2",
        "--layers",
        "2",
    )
    assert "is a symbolic link" in _one_line(result, 2)
    assert link.is_symlink() and target.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "precious.txt"]


def _synth_process(out: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "appliance",
            "model",
            "synth",
            str(out),
            "--arch",
            "qwen3moe",
            "--size",
            "1GiB",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_during_model_synth_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "big.gguf"
    proc = _synth_process(out)
    try:
        for _ in range(600):  # the partial file appears once the header is written
            partials = list(tmp_path.glob(".big.gguf.*.tmp"))
            if partials and partials[0].stat().st_size > 1 << 20:
                break
            time.sleep(0.1)
        assert partials, "the synth never started writing"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert stderr.strip() == "aborted"
    assert list(tmp_path.iterdir()) == []


def test_a_stale_partial_from_a_killed_synth_is_removed_and_reported(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    stale = tmp_path / f".m.gguf.{dead.stdout.strip()}.x1y2z3.tmp"
    stale.write_bytes(bytes(4096))
    result = run_cli(
        "model",
        "synth",
        str(tmp_path / "m.gguf"),
        "--arch",
        "qwen3moe",
        "--size",
        "8MiB",
        "--experts",
        "8",
        "--used",
        "2",
        "--layers",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert f"removed {stale}, left by an earlier synth that was killed" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def test_repro_preflight_fails_when_docker_is_unreachable() -> None:
    result = run_cli("repro", "preflight", "cpu", env=NO_DOCKER)
    message = _one_line(result, 1)
    assert (
        "Docker engine at unix:///nonexistent/appliance-test.sock (DOCKER_HOST) not reachable: "
    ) in message
    assert "point DOCKER_HOST at a running engine or unset it" in message
    assert "can run" not in result.stdout


def test_doctor_names_the_endpoint_and_the_error() -> None:
    import json

    result = run_cli("doctor", "--json", env=NO_DOCKER)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    docker = next(c for c in report["checks"] if c["name"] == "docker engine")
    assert docker["status"] == "fail"
    assert docker["reason"].startswith(
        "Docker engine at unix:///nonexistent/appliance-test.sock (DOCKER_HOST) not reachable: "
    )
    assert "DOCKER_HOST" in docker["fix"]
    assert report["facts"]["docker_endpoint"] == ("unix:///nonexistent/appliance-test.sock (DOCKER_HOST)")
