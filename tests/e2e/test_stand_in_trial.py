"""Trials on the stand-in GPU (`gpu: stand-in`) through `appliance run` on the cpu engine image:
a ggml-rpc-server container per trial whose memory limit is limits.vram, the engine joined to
its loopback, the planner's placement realized on device RPC0, and the server removed with the
trial; a device budget too small for the placement fails the trial in one line. The GPU
profiles at miniature scale: tiny-stand-in, and qwen35-shape-slice-stand-in (the published
experiment's shape, routing forced, with the expert cache)."""

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from appliance.analysis.capacity import model_experts
from appliance.analysis.placement import GOAL_PCT
from appliance.analysis.sweep_analysis import predicted_reads
from appliance.core.paths import cache_dir
from appliance.images import labels as L
from appliance.planner.accounting import account_file
from appliance.runs.profile import PROFILES_DIR, load_profile
from appliance.trace.calibration import layer_slice
from appliance.trace.format import read_trace
from appliance.trace.routes import follows_routes
from appliance.workflows.run import ensure_synth_model
from tests.conftest import run_cli
from tests.e2e.conftest import models_dir_with, user_env
from tests.models import tiny_model

VRAM = 1 << 30

pytestmark = [pytest.mark.docker, pytest.mark.engine]


def stand_in_profile(tmp_path: Path, model: Path, **changes: Any) -> Path:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw.update(name="stand-in-e2e", evidence=[], gpu="stand-in", placement="plan")
    raw.pop("sweep")
    raw["model"].update(file=model.name, bytes=None, sha256=None, synth=None)
    raw["limits"].update(memory="1GiB", vram=VRAM)
    raw["variants"] = [v for v in raw["variants"] if v["name"] in ("baseline", "demand-mmap")]
    raw["schedule"].update(repeats=1, n_predict=8)
    raw.update(changes)
    path = tmp_path / "stand-in.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def containers_of(run_id: str) -> list[str]:
    listed = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label={L.RUN}={run_id}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def trials_of(run: Path) -> dict[str, dict[str, Any]]:
    records = (json.loads(p.read_text()) for p in run.glob("trials/*/trial.json"))
    return {r["variant"]: r for r in records}


def test_a_planned_trial_offloads_every_slot_to_the_stand_in_device(
    engine_image_cpu: str, tmp_path: Path
) -> None:
    model = tiny_model("qwen3moe")
    run = tmp_path / "run"
    result = run_cli(
        "run",
        str(stand_in_profile(tmp_path, model)),
        "--models",
        str(models_dir_with(model, tmp_path)),
        "--out",
        str(run),
        "--image",
        engine_image_cpu,
        "--unsigned",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    layers = account_file(model).facts.layers
    trials = trials_of(run)
    assert sorted(trials) == ["baseline", "demand-mmap"]
    texts = set()
    for variant, record in trials.items():
        assert record["status"] == "ok", record
        assert record["engine_backend"] == "RPC"
        command = record["container"]["command"]
        assert command[command.index("--rpc") + 1] == "127.0.0.1:50052"
        assert command[command.index("-ngl") + 1] == str(layers + 1)
        assert record["container"]["network_mode"] == f"container:{record['container']['name']}-device"
        device = record["device_server"]
        assert device["memory_limit"] == VRAM and device["running_at_end"] is True
        assert device["oom_killed"] is False and 0 < device["peak_bytes"] <= VRAM
        trial_dir = run / "trials" / record["name"]
        timing = json.loads((trial_dir / "timing.json").read_text())
        # a paging variant on a device runs without op_offload, and the record says so
        assert timing["op_offload"] is (variant == "baseline")
        assert ("--no-op-offload" in command) is (variant != "baseline")
        placement = timing["placement"]
        assert placement["layers_offloaded"] == placement["layers_offloadable"] == layers + 1, variant
        texts.add((trial_dir / "output.txt").read_bytes())
    assert len(texts) == 1 and texts != {b""}
    assert containers_of(json.loads((run / "run.json").read_text())["run_id"]) == []


def test_a_device_budget_too_small_for_the_placement_fails_the_trial_in_one_line(
    engine_image_cpu: str, tmp_path: Path
) -> None:
    model = tiny_model("qwen3moe")
    profile = stand_in_profile(tmp_path, model, placement=["-ngl", "99"])
    raw = yaml.safe_load(profile.read_text())
    raw["limits"]["vram"] = "8MiB"
    raw["variants"] = raw["variants"][:1]
    profile.write_text(yaml.safe_dump(raw))
    run = tmp_path / "run"
    result = run_cli(
        "run", str(profile), "--models", str(models_dir_with(model, tmp_path)), "--out", str(run),
        "--image", engine_image_cpu, "--unsigned",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]  # a failed trial is a result of the run
    assert "the stand-in device server was OOM-killed" in result.stdout
    (record,) = trials_of(run).values()
    assert record["status"] == "failed"
    assert record["error"].startswith("the stand-in device server was OOM-killed: its 8388608 bytes")
    assert "\n" not in record["error"]
    assert record["device_server"]["oom_killed"] is True
    assert containers_of(json.loads((run / "run.json").read_text())["run_id"]) == []


@pytest.mark.slow
def test_the_miniature_gpu_profile_runs_as_planned_on_the_stand_in(
    engine_image_cpu: str, tmp_path: Path
) -> None:
    """Profile tiny-stand-in (make demo-gpu) at its smallest RAM limit and at 1.2 times the file:
    every trial placed as the planner says (all 4 + 1 slots offloaded, the last two layers'
    experts on the device), the device's cgroup peak and the host's within the planner's 5% and
    never under (at 1.2 times the file below the limit: the upload's pages and messages, then
    the host's pages), the model's bytes on the device exactly the planner's, texts identical
    across variants, bundle verified."""
    profile = load_profile("tiny-stand-in")
    shared = ensure_synth_model(profile, cache_dir() / "models" / "demo", Console(quiet=True))
    models = tmp_path / "models"
    models.mkdir()
    shutil.copyfile(shared, models / shared.name)  # a private copy: no other reader refills its pages
    run = tmp_path / "run"
    result = run_cli(
        "sweep", "tiny-stand-in", "--models", str(models), "--out", str(run), "--memory", "0.25,1.2",
        "--image", engine_image_cpu, env=user_env(tmp_path), timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    records = [json.loads(p.read_text()) for p in run.glob("trials/*/trial.json")]
    assert sorted(r["variant"] for r in records) == sorted(["baseline", "demand-mmap", "demand-prefetch"] * 2)
    assert all(r["status"] == "ok" and r["engine_backend"] == "RPC" for r in records), records
    results = json.loads((run / "results.json").read_text())
    assert results["byte_identity"]["all_identical"] is True
    rows = results["placement"]["trials"]
    assert len(rows) == 6
    for row in rows:
        assert row["layers_offloaded"] == 5, row
        assert row["error_pct"]["model_gpu"] == 0 and row["error_pct"]["model_cpu"] == 0, row
        assert 0 <= row["error_pct"]["device_peak"] <= GOAL_PCT, row
        assert 0 <= row["error_pct"]["peak"] <= GOAL_PCT, row
    limit = {r["name"]: r["memory_limit"] for r in records}
    below = [row for row in rows if row["measured_peak_bytes"] < limit[row["trial"]]]
    assert len(below) == 3, rows  # 1.2 times the file: the peaks the model must predict
    command = records[0]["container"]["command"]
    assert command[command.index("-ngl") :][:4] == ["-ngl", "5", "--n-cpu-moe", "2"]
    verified = run_cli("bundle", "verify", str(run), env=user_env(tmp_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.slow
def test_the_qwen35_slice_runs_the_gpu_profile_on_the_stand_in(
    engine_image_cpu_cache: str, tmp_path: Path
) -> None:
    """Profile qwen35-shape-slice-stand-in (make demo-gpu-slice): qwen35-8g's shape at
    miniature scale, a 2.8 GB slice under a 700 MiB RAM limit and a 1700 MiB device budget.
    Every trial is placed as planned (all 4 + 1 slots, the last two layers' experts on the
    device), its routing forced (each trace is the CPU-only slice's routes), the texts identical
    across baseline, demand mmap, prefetch and the expert cache, the planner within 5% of the
    host's and the device's peaks and never under, and the cache (host layers only) misses what
    its replay of those layers predicts."""
    profile = load_profile("qwen35-shape-slice-stand-in")
    models = tmp_path / "models"
    model = ensure_synth_model(profile, models, Console(quiet=True))
    run = tmp_path / "run"
    result = run_cli(
        "run", profile.name, "--models", str(models), "--out", str(run), env=user_env(tmp_path), timeout=900
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert engine_image_cpu_cache in result.stdout
    trials = trials_of(run)
    assert sorted(trials) == ["baseline", "demand-mmap", "demand-prefetch", "expert-lru"]
    assert all(t["status"] == "ok" and t["engine_backend"] == "RPC" for t in trials.values()), trials
    command = trials["baseline"]["container"]["command"]
    assert command[command.index("-ngl") :][:4] == ["-ngl", "5", "--n-cpu-moe", "2"]

    assert profile.routes is not None
    routes = (models / profile.routes.file).read_bytes()
    for record in trials.values():
        trace = read_trace(run / "trials" / record["name"] / "trace.moetrace")
        assert follows_routes(trace, routes), record["name"]
    results = json.loads((run / "results.json").read_text())
    assert results["byte_identity"]["all_identical"] is True
    for row in results["placement"]["trials"]:
        assert row["layers_offloaded"] == 5, row
        assert row["error_pct"]["model_cpu"] == 0 and row["error_pct"]["model_gpu"] == 0, row
        assert 0 <= row["error_pct"]["device_peak"] <= GOAL_PCT, row
        assert 0 <= row["error_pct"]["peak"] <= GOAL_PCT, row

    cached = run / "trials" / trials["expert-lru"]["name"]
    cache = json.loads((cached / "timing.json").read_text())["expert_cache"]
    assert (cache["host_layers"], cache["device_layers"]) == (2, 2)
    trace = read_trace(cached / "trace.moetrace")
    host = layer_slice(trace, [0, 1])
    decode = cache["decode"]
    assert decode["hits"] + decode["misses"] == profile.schedule.n_predict * 2 * trace.k
    experts = model_experts(model, trace)
    host_experts = dataclasses.replace(experts, expert_bytes={i: experts.expert_bytes[i] for i in (0, 1)})
    replay = predicted_reads(host, 32, host_experts)["policies"]["lru"]
    assert decode["misses"] == replay["decode_misses"] and decode["evictions"] > 0
    verified = run_cli("bundle", "verify", str(run), env=user_env(tmp_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
