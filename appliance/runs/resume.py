"""Resuming an incomplete run directory: which trials run again, and the checks that it is the
same profile, lock, trial plan, image and model.

Nothing in the directory changes before every check has passed: first the `verify` hook
(the workflows pass `appliance.workflows.resume_check`, which verifies the old seal: this
package cannot import `attest`), then the comparisons below. The old seal stays in place
until the resumed run is sealed afresh (`appliance.attest.bundle` writes both sealing files
aside before renaming either)."""

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.core.errors import ConfigError
from appliance.core.strict_load import load_json, read_text
from appliance.runs.plan import (
    Trial,
)
from appliance.runs.records import ResumedFrom, RunRecord
from appliance.runs.run_dir import (
    LOCK_INPUT,
    MODEL_INPUT,
    PROFILE_INPUT,
    SCHEDULE_INPUT,
    RunDir,
)
from appliance.runs.status import RunStatus, TrialStatus
from appliance.runs.trial import RunContext

# run_dir -> the old bundle's record (bundle digest, attestation sha256, signer; no trials
# carried over yet); raises a one-line ConfigError when the directory may not be resumed.
ResumeVerifier = Callable[[Path], ResumedFrom]
MODEL_IDENTITY = ("file", "bytes", "sha256")


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


def _differences(
    ctx: RunContext, run: RunRecord, trials: list[Trial], lock_raw: dict[str, Any], image_id: Any
) -> list[str]:
    """What of profile, lock, trial plan, image and model differs from the recorded run."""
    layout = RunDir(ctx.run_dir)
    schedule = _json_or_none(layout.input(SCHEDULE_INPUT))
    model = _json_or_none(layout.input(MODEL_INPUT))
    current = ctx.model.manifest()
    same_model = isinstance(model, dict) and all(
        model.get(key) == current.get(key) or key == "sha256" and None in (model.get(key), current.get(key))
        for key in MODEL_IDENTITY
    )
    checks = {
        "profile": _text_or_none(layout.input(PROFILE_INPUT)) == ctx.profile.source_text,
        "lock": _json_or_none(layout.input(LOCK_INPUT)) == lock_raw,
        "trial plan (--repeats, --memory, --variants)": isinstance(schedule, dict)
        and schedule.get("trials") == [t.name for t in trials],
        "image": image_id is None or run.image_id == image_id,
        "model": same_model,
    }
    return [name for name, same in checks.items() if not same]


def resume_point(
    ctx: RunContext,
    trials: list[Trial],
    lock_raw: dict[str, Any],
    verify: ResumeVerifier,
    image_id: Any = None,
) -> tuple[str, list[Trial], tuple[ResumedFrom, ...]]:
    """(the run's original start time, the trials it still lacks, its `resumed_from` record)
    for an incomplete run directory whose seal `verify` accepts and that was started with
    the same profile, lock, trial plan, image (`image_id`) and model; refuses anything else
    in one line and then nothing has changed. Once accepted, the trials to run again are
    discarded and provenance.json goes (collected afresh when the run is sealed)."""
    run_dir = RunDir(ctx.run_dir)
    old_bundle = verify(run_dir.path)
    run = run_dir.read_run()
    if run is None or run.run_id is None:
        raise ConfigError(
            f"{run_dir.path}: no {run_dir.run_file.name} with a run id: not a run directory to resume"
        )
    if run.status == RunStatus.COMPLETE:
        raise ConfigError(f"{run_dir.path} is complete: nothing to resume")
    differ = _differences(ctx, run, trials, lock_raw, image_id)
    if differ:
        raise ConfigError(
            f"{run_dir.path} was started with another {', '.join(differ)}: "
            "resume it with the same ones, or start a new run; nothing was changed"
        )
    pending = [t for t in trials if needs_rerun(run_dir.trial(t.name).read_record())]
    rerun = {t.name for t in pending}
    resumed_from = (
        *(run.resumed_from or ()),
        dataclasses.replace(old_bundle, carried_over=tuple(t.name for t in trials if t.name not in rerun)),
    )
    ctx.run_id = run.run_id
    for trial in pending:
        run_dir.discard_trial(trial.name)
    run_dir.provenance_file.unlink(missing_ok=True)
    return run.started_utc, pending, resumed_from
