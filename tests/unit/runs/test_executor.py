"""The local executor runs trials in plan order; a resumed run starts only what it lacks and
refuses a run directory of another plan."""

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from appliance.core.errors import ConfigError
from appliance.engine.lock import load_lock
from appliance.runs.executor import LocalExecutor
from appliance.runs.plan import Trial, trial_plan
from appliance.runs.profile import load_profile
from appliance.runs.record import schedule_record
from appliance.runs.resume import needs_rerun, resume_point
from appliance.runs.trial import RunContext


def test_local_executor_runs_every_trial_in_order_and_says_where(tmp_path: Path) -> None:
    profile = load_profile("tiny-oversub")
    plan = trial_plan(profile, 2)
    started: list[tuple[str, str]] = []

    def one_trial(trial: Trial, work_dir: Path) -> dict[str, Any]:
        (work_dir / trial.name).mkdir()
        return {"index": trial.index}

    records = list(
        LocalExecutor().run(
            one_trial, plan, tmp_path, on_start=lambda t, where: started.append((t.name, where))
        )
    )
    assert [r["index"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert started == [(t.name, "this machine") for t in plan]
    assert sorted(p.name for p in tmp_path.iterdir()) == [t.name for t in plan]
    assert LocalExecutor().describe() == {"kind": "local"}


def incomplete_run(tmp_path: Path, statuses: dict[str, dict[str, Any]]) -> tuple[RunContext, list[Trial]]:
    profile = load_profile("tiny-oversub")
    plan = trial_plan(profile, 1)
    run = tmp_path / "run"
    (run / "inputs").mkdir(parents=True)
    (run / "inputs" / "profile.yaml").write_text(profile.source_text)
    (run / "inputs" / "lock.json").write_text(json.dumps(load_lock().raw))
    (run / "inputs" / "schedule.json").write_text(json.dumps(schedule_record(profile, plan)))
    (run / "run.json").write_text(
        json.dumps({"status": "incomplete", "run_id": "abc123", "started_utc": "2026-01-01T00:00:00.000Z"})
    )
    for name, record in statuses.items():
        (run / "trials" / name).mkdir(parents=True)
        (run / "trials" / name / "trial.json").write_text(json.dumps(record))
        (run / "trials" / name / "stdout.txt").write_text("kept")
    (run / "manifest.json").write_text("{}")
    ctx = RunContext(None, profile, None, None, None, run, "new", Console(quiet=True))  # type: ignore[arg-type]
    return ctx, plan


def test_resume_runs_missing_interrupted_and_unscheduled_trials_only(tmp_path: Path) -> None:
    ctx, plan = incomplete_run(
        tmp_path,
        {
            "001-baseline-r1": {"status": "ok"},
            "002-demand-mmap-r1": {"status": "interrupted", "interrupted": True},
        },
    )
    started, pending = resume_point(ctx, plan, load_lock().raw)
    assert started == "2026-01-01T00:00:00.000Z" and ctx.run_id == "abc123"
    assert [t.name for t in pending] == ["002-demand-mmap-r1", "003-demand-prefetch-r1"]
    assert (ctx.run_dir / "trials" / "001-baseline-r1" / "stdout.txt").read_text() == "kept"
    assert not (ctx.run_dir / "trials" / "002-demand-mmap-r1").exists()
    assert not (ctx.run_dir / "manifest.json").exists()  # sealed afresh at the end
    assert needs_rerun({"status": "failed", "unscheduled": True})
    assert not needs_rerun({"status": "oom-killed"})


def test_resume_refuses_another_plan_or_a_complete_run(tmp_path: Path) -> None:
    ctx, _ = incomplete_run(tmp_path, {})
    with pytest.raises(ConfigError, match="another profile, lock or trial plan"):
        resume_point(ctx, trial_plan(ctx.profile, 2), load_lock().raw)
    (ctx.run_dir / "run.json").write_text(json.dumps({"status": "complete", "run_id": "x"}))
    with pytest.raises(ConfigError, match="is complete: nothing to resume"):
        resume_point(ctx, trial_plan(ctx.profile, 1), load_lock().raw)
