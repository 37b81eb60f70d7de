"""Run a profile: one container per trial, cold page cache, exact limits, everything recorded.

The run directory's layout is `appliance.runs.run_dir` (`appliance.attest.bundle` signs it
afterwards).

Every file is written under a temporary name and renamed. A trial that is OOM-killed or fails
is recorded with its logs and the run goes on; Ctrl-C stops the running container, records
what was collected and marks the run incomplete. Trials run through an executor
(`appliance.runs.executor`): this machine by default, or a cluster; an incomplete run directory
can be resumed, running only the trials it lacks.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from appliance.core.errors import ConfigError
from appliance.runs.executor import LocalExecutor, TrialExecutor
from appliance.runs.plan import (
    Trial,
)
from appliance.runs.record import run_record, schedule_record, write_inputs, write_run_record
from appliance.runs.records import ResumedFrom, RunSetup
from appliance.runs.resume import ResumeVerifier, resume_point
from appliance.runs.run_dir import RunDir
from appliance.runs.status import RunStatus, TrialStatus
from appliance.runs.trial import RunContext, TrialInterrupted, TrialJob, utc_now

Finalizer = Callable[[Path], None]
# After the trials: writes results.json and plots, returns (results, plots written);
# appliance.analysis.results.analyze_run.
Analyzer = Callable[[Path], tuple[dict[str, Any], list[Path]]]
Prelude = Callable[["RunContext"], None]


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    status: RunStatus
    trials: list[dict[str, Any]]
    results: dict[str, Any]
    plots: list[Path]


def execute_run(
    ctx: RunContext,
    trials: list[Trial],
    lock_raw: dict[str, Any],
    setup: RunSetup,
    finalize: Finalizer | None = None,
    before_trials: Prelude | None = None,
    analyze: Analyzer | None = None,
    executor: TrialExecutor | None = None,
    resume: bool = False,
    verify_resume: ResumeVerifier | None = None,
) -> RunOutcome:
    """Every trial through the executor (this machine by default), then the analyze hook
    (statistics and plots: `appliance.analysis.results.analyze_run`) and the finalize hook.

    `before_trials(ctx)` runs once after the inputs are written and before the first trial
    (a sweep's disk probe); Ctrl-C there ends the run as incomplete, like during a trial.

    `finalize(run_dir)` runs last, for complete and incomplete runs alike (the pipeline seals
    the bundle there). With `resume`, ctx.run_dir is an incomplete run of the same plan whose
    seal `verify_resume` accepts (`appliance.workflows.resume_check`), and only its missing
    trials run; run.json's `resumed_from` names the bundle it carried trials over from.
    """
    executor = executor or LocalExecutor()
    resumed_from: tuple[ResumedFrom, ...] | None = None
    if resume:
        if verify_resume is None:
            raise ConfigError("resuming needs a check of the old seal (verify_resume): nothing was changed")
        started, pending, resumed_from = resume_point(ctx, trials, lock_raw, verify_resume, setup.image_id)
        ctx.console.print(
            f"resuming {ctx.run_dir}: {len(trials) - len(pending)} of "
            f"{len(trials)} trials recorded, {len(pending)} to run"
        )
    else:
        started, pending = utc_now(), trials
        ctx.run_dir.mkdir(parents=True)
        write_inputs(ctx.run_dir, ctx.profile, lock_raw, schedule_record(ctx.profile, trials), ctx.model)
    layout = RunDir(ctx.run_dir)

    def write_run(status: RunStatus, executor: dict[str, Any] | None = None) -> None:
        write_run_record(ctx.run_dir, run_record(ctx, status, started, trials, setup, executor, resumed_from))

    write_run(RunStatus.INCOMPLETE)

    def starting(trial: Trial, where: str) -> None:
        ctx.console.print(f"trial {trial.name} on {where}: evicting model, starting container")

    status = RunStatus.COMPLETE
    try:
        if before_trials is not None:
            before_trials(ctx)
        job = TrialJob.of(ctx)  # after the prelude, which may set the trials' timeout
        for record in executor.run(job, pending, ctx.run_dir, on_start=starting):
            ctx.trial_records.append(record)
            ctx.console.print(_trial_line(record))
    except TrialInterrupted as stop:
        ctx.trial_records.append(stop.record)
        status = RunStatus.INCOMPLETE
    except KeyboardInterrupt:
        status = RunStatus.INCOMPLETE
    except BaseException:
        write_run(RunStatus.FAILED, executor.describe())
        raise
    finally:
        scratch = layout.scratch
        if scratch.is_dir() and not any(scratch.iterdir()):
            scratch.rmdir()
    if status == RunStatus.INCOMPLETE:
        ctx.console.print(
            "[red]interrupted[/red]: running trials stopped, queued trials not started, run marked incomplete"
        )
    results, plots = analyze(ctx.run_dir) if analyze is not None else ({}, [])
    write_run(status, executor.describe())
    if finalize is not None:
        finalize(ctx.run_dir)
    return RunOutcome(ctx.run_dir, status, ctx.trial_records, results, plots)


def _trial_line(record: dict[str, Any]) -> str:
    status = record["status"]
    colour = {
        TrialStatus.OK: "green",
        TrialStatus.OOM_KILLED: "red",
        TrialStatus.FAILED: "red",
        TrialStatus.OVER_BUDGET: "red",
    }.get(status, "yellow")
    wall = record.get("engine_wall_s")
    peak = record.get("cgroup", {}).get("peak_bytes")
    where = (
        f" on {record['node']['hostname']} ({record['node']['node_id'][:8]})"
        if isinstance(record.get("node"), dict)
        else ""
    )
    parts = [f"  trial {record['name']}{where}: [{colour}]{status}[/{colour}] exit {record.get('exit_code')}"]
    if wall is not None:
        parts.append(f"wall {wall:.3f} s")
    if peak is not None:
        parts.append(f"peak {peak / 2**20:.1f} MiB")
    if record.get("error"):
        parts.append(escape(str(record["error"])))
    return ", ".join(parts)
