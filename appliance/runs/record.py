"""The records a run writes: inputs/, the schedule and run.json (with every limit its trials
ran under)."""

from pathlib import Path
from typing import Any

from appliance import __version__
from appliance.core import atomic
from appliance.runs.model_files import CheckedModel
from appliance.runs.plan import (
    Trial,
)
from appliance.runs.profile import Profile
from appliance.runs.records import (
    LimitUsed,
    ResumedFrom,
    RunLimits,
    RunRecord,
    RunSetup,
    ScheduledVariant,
    ScheduleRecord,
)
from appliance.runs.run_dir import (
    LOCK_INPUT,
    MODEL_INPUT,
    PROFILE_INPUT,
    SCHEDULE_INPUT,
    RunDir,
)
from appliance.runs.status import RunStatus
from appliance.runs.trial import RunContext, utc_now


def write_inputs(
    run_dir: Path, profile: Profile, lock_raw: dict[str, Any], schedule: dict[str, Any], model: CheckedModel
) -> None:
    inputs = RunDir(run_dir)
    atomic.write_text(inputs.input(PROFILE_INPUT), profile.source_text)
    atomic.write_json(inputs.input(LOCK_INPUT), lock_raw)
    atomic.write_json(inputs.input(SCHEDULE_INPUT), schedule)
    atomic.write_json(
        inputs.input(MODEL_INPUT),
        {
            **model.manifest(),
            "pinned_bytes": profile.model.bytes,
            "pinned_sha256": profile.model.sha256,
            "source": profile.model.source,
            "synth": profile.model.synth,
        },
    )


def schedule_record(profile: Profile, trials: list[Trial]) -> dict[str, Any]:
    """inputs/schedule.json (`ScheduleRecord`)."""
    s = profile.schedule
    limits = sorted({t.memory for t in trials if t.memory is not None})
    return ScheduleRecord(
        profile=profile.name,
        repeats=max(t.repeat for t in trials),
        order=s.order,
        n_predict=s.n_predict,
        prompt=s.prompt,
        seed=s.seed,
        cold_cache=s.cold_cache,
        trace=profile.trace,
        variants=tuple(ScheduledVariant(v.name, v.env, v.args, v.future, v.routes) for v in profile.variants),
        trials=tuple(t.name for t in trials),
        memory_limits=tuple(limits) if limits else None,
    ).to_json()


def limits_record(profile: Profile, trials: list[Trial]) -> RunLimits:
    """run.json `limits`: every (memory, memory+swap) limit the trials ran under, ascending,
    with the sweep point that asked for it; the shared limit only when there is one."""
    used = sorted(
        {(t.memory_limit(profile), t.memswap_limit(profile), t.point) for t in trials},
        key=lambda limit: limit[0],
    )
    shared = used[0] if len(used) == 1 else (None, None, None)
    return RunLimits(
        memory_bytes=shared[0],
        memswap_bytes=shared[1],
        trials=tuple(LimitUsed(memory, memswap, point) for memory, memswap, point in used),
    )


def run_record(
    ctx: RunContext,
    status: RunStatus,
    started: str,
    trials: list[Trial],
    setup: RunSetup,
    executor: dict[str, Any] | None = None,
    resumed_from: tuple[ResumedFrom, ...] | None = None,
) -> RunRecord:
    """run.json as it stands now: the runner's fields, the workflow's `setup`, and once known
    the executor and the bundles a resumed run carried trials over from."""
    return RunRecord(
        status=status,
        profile=ctx.profile.name,
        started_utc=started,
        ended_utc=utc_now(),
        appliance_version=__version__,
        trial_count=len(trials),
        trials_recorded=len(list(RunDir(ctx.run_dir).recorded())),
        run_id=ctx.run_id,
        engine=ctx.engine.identity(),
        model_digest_status=ctx.model.digest_status,
        limits=limits_record(ctx.profile, trials),
        cgroup_version=ctx.settings.cgroup_version,
        trial_timeout_s=ctx.trial_timeout_s,
        executor=executor,
        resumed_from=resumed_from,
        **setup.fields(),
    )


def write_run_record(run_dir: Path, record: RunRecord) -> None:
    """run.json, written through its record (keys sorted, as every run.json was)."""
    atomic.write_json(RunDir(run_dir).run_file, record.to_json())
