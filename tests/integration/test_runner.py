"""The runner against real Docker, with shell commands standing in for the engine.

The commands read the model from the read-only mount, write engine-like outputs, probe the
container's confinement, allocate past the limit (OOM) or wait to be interrupted: every part
of the runner except llama-moe-trace itself.
"""

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.analysis.results import analyze_run
from appliance.engine.lock import load_lock
from appliance.images.labels import RUN as LABEL
from appliance.runs.execute import RunOutcome, execute_run
from appliance.runs.plan import CommandEngine, trial_plan
from appliance.runs.prepare import RunRequest, prepare_run
from appliance.runs.profile import load_profile
from appliance.runs.records import RunSetup
from appliance.runs.trial import RunContext
from tests.conftest import REPO, sigint_default

pytestmark = pytest.mark.docker

LIMIT = 64 << 20
MODEL_BYTES = 96 << 20  # 1.5x the limit: page cache must be reclaimed inside the cgroup
ENGINE_LIKE = (
    "cat /models/m.bin > /dev/null; printf '%s' > /results/output.txt; "
    'echo \'{"decode_tokens_per_s": %s, "prefill_tokens_per_s": 9, '
    '"decode_tokens": 4}\' > /results/timing.json; echo done-%s'
)
PROBE = (
    "touch /models/x 2>&1; touch /etc/x 2>&1; grep CapEff /proc/self/status; "
    "ls /sys/class/net; echo scratch > /tmp/s && cat /tmp/s"
)
COMMANDS = {
    "baseline": ["sh", "-c", ENGINE_LIKE % ("same words", "10", "baseline")],
    "demand-mmap": ["sh", "-c", ENGINE_LIKE % ("same words and more", "20", "demand")],
    "probe": ["sh", "-c", PROBE],
    "oom": ["sh", "-c", "head -c 300M /dev/zero | tail > /dev/null"],
    "slow": ["sh", "-c", "echo slow; exec sleep 300"],
}


@pytest.fixture(autouse=True)
def _digest_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def image(runtime_base_image: str) -> str:
    return runtime_base_image


def _profile(tmp_path: Path, variants: list[str], repeats: int) -> Path:
    raw = {
        "schema_version": 1,
        "name": "harness-check",
        "description": "shell commands in place of the engine",
        "model": {"file": "m.bin", "bytes": MODEL_BYTES, "sha256": None, "source": "the test"},
        "target": "cpu",
        "gpu": "none",
        "limits": {"memory": LIMIT, "swap": 0, "engine_min_memory": "16MiB"},
        "engine": {"args": []},
        "variants": [
            {"name": v, "env": {"LLAMA_MMAP_DEMAND": "1"} if v == "demand-mmap" else {}, "args": []}
            for v in variants
        ],
        "schedule": {
            "repeats": repeats,
            "order": "interleaved",
            "n_predict": 4,
            "prompt": "hi",
            "seed": 1,
            "cold_cache": True,
        },
        "trace": False,
        "evidence": [],
    }
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _models(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.bin").write_bytes(os.urandom(MODEL_BYTES))
    return models


def _tree(directory: Path) -> list[tuple[str, int, str]]:
    return sorted(
        (p.name, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in directory.iterdir()
    )


def _run(
    docker_client: Any,
    image: str,
    profile_path: Path,
    models: Path,
    out: Path,
    run_id: str,
    finalize: Any = None,
    timeout_s: float | None = None,
) -> RunOutcome:
    from rich.console import Console

    profile, lock = load_profile(str(profile_path)), load_lock()
    request = RunRequest(trial_plan(profile), out=out, image=image)
    prepared, client = prepare_run(profile, models, lock, request, lambda: docker_client)
    ctx = RunContext(
        client,
        profile,
        CommandEngine(image, COMMANDS),
        prepared.model,
        prepared.settings,
        prepared.run_dir,
        run_id,
        Console(quiet=True),
        trial_timeout_s=timeout_s,
    )
    analyze = functools.partial(analyze_run, profile=profile)
    return execute_run(ctx, prepared.trials, lock.raw, RunSetup(), finalize=finalize, analyze=analyze)


def _leftover_containers(docker_client: Any, run_id: str) -> list[str]:
    return [c.name for c in docker_client.containers.list(all=True, filters={"label": f"{LABEL}={run_id}"})]


def test_a_run_records_every_trial_including_oom(docker_client: Any, image: str, tmp_path: Path) -> None:
    models = _models(tmp_path)
    before = _tree(models)
    finalized: list[Path] = []
    run_id = f"test{os.getpid()}a"
    outcome = _run(
        docker_client,
        image,
        _profile(tmp_path, ["baseline", "demand-mmap", "probe", "oom"], 2),
        models,
        tmp_path / "run",
        run_id,
        finalize=finalized.append,
    )
    run_dir = tmp_path / "run"
    assert outcome.status == "complete" and finalized == [run_dir]
    assert _tree(models) == before
    assert _leftover_containers(docker_client, run_id) == []
    assert not (run_dir / ".scratch").exists()

    run = json.loads((run_dir / "run.json").read_text())
    assert (run["status"], run["profile"], run["trial_count"]) == ("complete", "harness-check", 8)
    assert run["started_utc"].endswith("Z") and run["ended_utc"] >= run["started_utc"]
    for name in ("profile.yaml", "lock.json", "schedule.json", "model.json"):
        assert (run_dir / "inputs" / name).is_file()
    model = json.loads((run_dir / "inputs" / "model.json").read_text())
    assert model["sha256"] == hashlib.sha256((models / "m.bin").read_bytes()).hexdigest()
    assert model["digest_status"] == "unpinned"

    trials = {
        d.name: json.loads((d / "trial.json").read_text()) for d in sorted((run_dir / "trials").iterdir())
    }
    assert list(trials) == [
        "001-baseline-r1",
        "002-demand-mmap-r1",
        "003-probe-r1",
        "004-oom-r1",
        "005-baseline-r2",
        "006-demand-mmap-r2",
        "007-probe-r2",
        "008-oom-r2",
    ]
    for name, trial in trials.items():
        cgroup = trial["cgroup"]
        assert trial["residency_at_start"]["resident_pages"] == 0, name
        assert 0 < cgroup["peak_bytes"] <= LIMIT, name
        assert cgroup["limit_bytes"] == LIMIT
        assert trial["container"]["mem_limit"] == trial["container"]["memswap_limit"] == LIMIT
        on_disk = set(os.listdir(run_dir / "trials" / name))
        assert {f for f, present in trial["files"].items() if present} | {"trial.json"} == on_disk
        if trial["variant"] in ("baseline", "demand-mmap"):
            assert trial["status"] == "ok" and trial["exit_code"] == 0
            # a cold read of the whole model cannot read less than the model from the device
            assert cgroup["block_read_bytes"][trial["model_device"]] >= MODEL_BYTES, name
            assert (run_dir / "trials" / name / "stdout.txt").read_text().startswith("done-")
        if trial["variant"] == "oom":
            assert trial["status"] == "oom-killed" and trial["oom_killed"] is True
            assert cgroup["oom_kills"] >= 1 and trial["files"]["output.txt"] is False
    probe = (run_dir / "trials" / "003-probe-r1" / "stdout.txt").read_text()
    assert probe.count("Read-only file system") == 2  # the model mount and the root filesystem
    assert "CapEff:\t0000000000000000" in probe
    assert probe.split("CapEff:\t0000000000000000\n")[1].split() == ["lo", "scratch"]

    results = json.loads((run_dir / "results.json").read_text())
    assert results["variants"]["baseline"]["decode_tps"]["samples"] == [10.0, 10.0]
    assert results["variants"]["oom"]["counts"]["oom-killed"] == 2
    assert results["byte_identity"]["all_identical"] is True
    demand = next(r for r in results["ratios"] if r["numerator"] == "demand-mmap")
    assert demand["metrics"]["decode_tps"]["samples"] == [2.0, 2.0]
    pngs = sorted(p.name for p in (run_dir / "plots").iterdir())
    assert pngs == ["decode_tps.png", "trial_resources.png"]
    assert all((run_dir / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_a_trial_past_its_timeout_is_stopped_and_recorded(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    run_id = f"test{os.getpid()}t"
    outcome = _run(
        docker_client,
        image,
        _profile(tmp_path, ["baseline", "slow"], 1),
        _models(tmp_path),
        tmp_path / "run",
        run_id,
        timeout_s=2.0,
    )
    assert outcome.status == "complete"
    assert [t["status"] for t in outcome.trials] == ["ok", "timed-out"]
    slow = json.loads((tmp_path / "run" / "trials" / "002-slow-r1" / "trial.json").read_text())
    assert slow["timed_out_after_s"] == 2.0 and slow["exit_code"] == 137
    assert "peak_bytes" in slow["cgroup"]
    assert (tmp_path / "run" / "trials" / "002-slow-r1" / "stdout.txt").read_text() == "slow\n"
    assert _leftover_containers(docker_client, run_id) == []


DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from rich.console import Console
    from appliance.engine.lock import load_lock
    from appliance.runs.profile import load_profile
    from appliance.host.docker import docker_client
    from appliance.runs.execute import execute_run
    from appliance.runs.records import RunSetup
    from appliance.runs.trial import RunContext
    from appliance.runs.plan import CommandEngine
    from appliance.runs.prepare import prepare_run
    from appliance.runs.plan import trial_plan
    from appliance.runs.prepare import RunRequest
    from appliance.analysis.results import analyze_run
    import functools
    profile_path, models, out, run_id, image = sys.argv[1:]
    profile, lock = load_profile(profile_path), load_lock()
    request = RunRequest(trial_plan(profile), out=Path(out), image=image)
    prepared, client = prepare_run(profile, Path(models), lock, request, docker_client)
    engine = CommandEngine(image, {"baseline": ["sh", "-c", "echo waiting; sleep 300"],
                                   "demand-mmap": ["true"]})
    ctx = RunContext(client, profile, engine, prepared.model, prepared.settings,
                     prepared.run_dir, run_id, Console())
    analyze = functools.partial(analyze_run, profile=profile)
    outcome = execute_run(ctx, prepared.trials, lock.raw, RunSetup(), analyze=analyze)
    print("STATUS", outcome.status, flush=True)
""")


def test_ctrl_c_stops_the_container_and_marks_the_run_incomplete(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    run_id = f"test{os.getpid()}c"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [
            sys.executable,
            str(driver),
            str(_profile(tmp_path, ["baseline", "demand-mmap"], 2)),
            str(_models(tmp_path)),
            str(tmp_path / "run"),
            run_id,
            image,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=sigint_default,
    )
    running = None
    try:
        deadline = time.monotonic() + 600  # a state, not a moment: the engine is known to run
        while running is None and time.monotonic() < deadline and proc.poll() is None:
            for container in docker_client.containers.list(filters={"label": f"{LABEL}={run_id}"}):
                if container.status == "running" and b"waiting" in container.logs():
                    running = container.name
            time.sleep(0.1)
        if running is None:
            pytest.fail("the first trial's container was never seen running")
        proc.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        output, _ = proc.communicate(timeout=120)
        stopped_s = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            proc.kill()
    assert running == f"appliance-{run_id}-001"
    assert proc.returncode == 0, output
    assert stopped_s < 30, f"{stopped_s:.1f} s from Ctrl-C to exit\n{output}"
    assert "STATUS incomplete" in output
    assert _leftover_containers(docker_client, run_id) == []
    run_dir = tmp_path / "run"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "incomplete" and run["trials_recorded"] == 1
    assert [d.name for d in (run_dir / "trials").iterdir()] == ["001-baseline-r1"]
    trial = json.loads((run_dir / "trials" / "001-baseline-r1" / "trial.json").read_text())
    assert trial["status"] == "interrupted"
    assert (run_dir / "trials" / "001-baseline-r1" / "stdout.txt").read_text() == "waiting\n"
    assert (run_dir / "results.json").is_file()


def test_cli_run_records_a_missing_engine_as_failed_trials_and_goes_on(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    from tests.conftest import run_cli

    models = _models(tmp_path)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "APPLIANCE_TRUSTED_KEYS": str(tmp_path / "trusted")}
    result = run_cli(
        "run",
        str(_profile(tmp_path, ["baseline", "demand-mmap"], 1)),
        "--models",
        str(models),
        "--image",
        image,
        "--out",
        str(tmp_path / "run"),
        env=env,
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    keyid = manifest["attestation"]["public_key"]["keyid"]  # signed with a key made on first use
    assert (tmp_path / "trusted" / f"{keyid}.pub.json").exists()
    assert run_cli("bundle", "verify", str(tmp_path / "run"), env=env).returncode == 0
    assert "run complete" in result.stdout and "001-baseline-r1: failed" in result.stdout
    assert "sha256 " in result.stdout and "the profile pins no digest" in result.stdout
    for name in ("001-baseline-r1", "002-demand-mmap-r1"):
        trial = json.loads((tmp_path / "run" / "trials" / name / "trial.json").read_text())
        assert (trial["status"], trial["exit_code"]) == ("failed", 127)
        stderr = (tmp_path / "run" / "trials" / name / "stderr.txt").read_text()
        assert "llama-moe-trace: not found" in stderr
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "complete"
