"""The interrupt path is bounded: after Ctrl-C a trial's container is stopped and removed within
a deadline whatever Docker does (here: a Docker socket that accepts and never answers, what a
daemon stuck under load looks like to its client), and a second Ctrl-C exits at once.

The trial record names the backend the engine ran on, from the engine's own timing record."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from appliance.runs.trial import engine_backend, within
from tests.conftest import REPO, sigint_default

HUNG_DOCKER = textwrap.dedent("""
    import json, os, signal, socket, sys, threading, time
    import docker
    from appliance.runs.trial import TrialContainer

    path, seconds, second_ctrl_c = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "yes"
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in iter(int, 1)], daemon=True).start()
    client = docker.DockerClient(base_url=f"unix://{path}", version="1.43", timeout=3600)
    box = TrialContainer(client, "appliance-hung-001")
    if second_ctrl_c:
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    record = {}
    box.stop_after_interrupt(record, seconds)
    print(json.dumps({"seconds": time.monotonic() - started, "record": record}))
""")


def _run(tmp_path: Path, seconds: float, second: bool) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "hung.py"
    script.write_text(HUNG_DOCKER)
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "docker.sock"), str(seconds), "yes" if second else "no"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=sigint_default,
    )


def test_a_docker_that_never_answers_costs_the_deadline_and_is_recorded(tmp_path: Path) -> None:
    result = _run(tmp_path, 2.0, second=False)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert 2.0 <= out["seconds"] < 5.0
    assert out["record"] == {
        "interrupt_cleanup": "Docker did not stop and remove container appliance-hung-001 within 2 s: "
        "it may be left (docker rm -f appliance-hung-001)"
    }


def test_a_second_ctrl_c_exits_at_once_saying_what_may_be_left(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _run(tmp_path, 30.0, second=True)
    assert result.returncode == 130
    assert time.monotonic() - started < 15.0  # not the 30 s deadline
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "second Ctrl-C: exiting now; container appliance-hung-001 may still exist "
        "(docker rm -f appliance-hung-001) and its trial has no record; the run stays incomplete"
    )


def test_within_tells_a_finished_step_from_one_still_running() -> None:
    never = threading.Event()
    started = time.monotonic()
    assert within(never.wait, 0.3) is False
    assert time.monotonic() - started < 2.0
    assert within(lambda: None, 5.0) is True
    assert within(lambda: 1 / 0 and None, 5.0) is True  # a failing stop has ended too


def test_the_trial_record_takes_the_backend_from_the_engine_timing_record(tmp_path: Path) -> None:
    timing = tmp_path / "timing.json"
    assert engine_backend(timing) is None  # the engine wrote none
    timing.write_text(json.dumps({"tool": "llama-moe-trace", "backend": "CPU", "devices": "CPU"}))
    assert engine_backend(timing) == "CPU"
    timing.write_text("[1, 2]")
    assert engine_backend(timing) is None
