"""Resuming an incomplete run directory: which trials run again, and the checks that it is the
same profile, lock and trial plan."""

from pathlib import Path
from typing import Any

from appliance.core.errors import ConfigError
from appliance.core.strict_load import load_json, read_text
from appliance.runs.plan import (
    Trial,
)
from appliance.runs.run_dir import (
    LOCK_INPUT,
    PROFILE_INPUT,
    SCHEDULE_INPUT,
    RunDir,
)
from appliance.runs.status import RunStatus, TrialStatus
from appliance.runs.trial import RunContext, utc_now


# Trials a resumed run starts again: never recorded, stopped by Ctrl-C, or left unrun because
# no cluster node could take them.
def needs_rerun(record: dict[str, Any] | None) -> bool:
    return (
        record is None or record.get("status") == TrialStatus.INTERRUPTED or bool(record.get("unscheduled"))
    )


def _json_or_none(path: Path) -> Any:
    try:
        return load_json(path)
    except ConfigError:
        return None


def _text_or_none(path: Path) -> str | None:
    try:
        return read_text(path)
    except ConfigError:
        return None


def resume_point(ctx: RunContext, trials: list[Trial], lock_raw: dict[str, Any]) -> tuple[str, list[Trial]]:
    """(the run's original start time, the trials it still lacks) for an incomplete run
    directory of the same profile, lock and trial plan; refuses anything else in one line."""
    run_dir = RunDir(ctx.run_dir)
    run = run_dir.read_run()
    if run is None or "run_id" not in run:
        raise ConfigError(
            f"{run_dir.path}: no {run_dir.run_file.name} with a run id: not a run directory to resume"
        )
    if run.get("status") == RunStatus.COMPLETE:
        raise ConfigError(f"{run_dir.path} is complete: nothing to resume")
    profile_input = run_dir.input(PROFILE_INPUT)
    schedule = _json_or_none(run_dir.input(SCHEDULE_INPUT)) or {}
    same = (
        _text_or_none(profile_input) == ctx.profile.source_text
        and _json_or_none(run_dir.input(LOCK_INPUT)) == lock_raw
        and schedule.get("trials") == [t.name for t in trials]
    )
    if not same:
        raise ConfigError(
            f"{run_dir.path} was started with another profile, lock or trial plan "
            "(--repeats): resume it with the same ones, or start a new run"
        )
    ctx.run_id = str(run["run_id"])
    pending = [t for t in trials if needs_rerun(run_dir.trial(t.name).read_record())]
    for trial in pending:
        run_dir.discard_trial(trial.name)
    run_dir.unseal()
    return str(run.get("started_utc") or utc_now()), pending
