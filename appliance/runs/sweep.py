"""A sweep's plan before anything starts: the limits (resolved once), the trials, the time
estimate and every check of `prepare_run`; the grid it prints; the disk probe it runs first.
`appliance.workflows.sweep` chains it with the trials, the analysis and the seal.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from appliance.core.errors import ConfigError
from appliance.core.progress import ProgressFn
from appliance.engine.lock import Lock
from appliance.host.docker import docker_client
from appliance.host.gpu import Gpu
from appliance.runs.memory_points import (
    MemoryPoint,
    SweepLimit,
    limit_label,
    parse_memory_list,
    resolve_limits,
)
from appliance.runs.model_files import SKELETON, locate_model
from appliance.runs.placement import placement_text
from appliance.runs.plan import DiskProbeEngine, Trial, sweep_plan
from appliance.runs.prepare import PreparedRun, RunRequest, prepare_run
from appliance.runs.profile import DOCKER_MIN_MEMORY, Profile, Variant, format_size
from appliance.runs.records import SweepRecord
from appliance.runs.run_dir import PROBE_DIR
from appliance.runs.trial import RunContext, TrialInterrupted, run_trial
from appliance.runs.trial_time import ASSUMED_READ_BPS, TRIAL_OVERHEAD_S, trial_read_bytes
from appliance.trace.expert_bytes import gguf_expert_layout

DEFAULT_MAX_HOURS = 6.0
PROBE_READS = 64
PROBE_VARIANT = Variant(name="disk-probe", env={}, args=())


@dataclass(frozen=True)
class SweepPlan:
    profile: Profile  # the sweep's n_predict applied
    prepared: PreparedRun  # its trials are the sweep's
    points: tuple[MemoryPoint, ...]  # as requested, in the order written
    limits: list[SweepLimit]  # resolved once, ascending; every trial carries its own
    expert_bytes: int
    estimate_s: float

    def run_record(self) -> SweepRecord:
        """run.json's `sweep`: the limits as written and as the trials ran under them."""
        return SweepRecord(
            memory=tuple(p.text for p in self.points),
            limits=tuple(limit.bytes for limit in self.limits),
            labels=tuple(limit_label(limit.bytes) for limit in self.limits),
            n_predict=self.profile.schedule.n_predict,
            probe_block_bytes=self.expert_bytes,
        )

    def probe_trial(self) -> Trial:
        largest = max(self.limits)
        return Trial(0, PROBE_VARIANT, 1, largest.bytes, largest.point)


def sweep_profile(profile: Profile) -> Profile:
    """The profile as a sweep runs it: the sweep's n_predict, when it sets one."""
    if profile.sweep is None or profile.sweep.n_predict is None:
        return profile
    return dataclasses.replace(
        profile, schedule=dataclasses.replace(profile.schedule, n_predict=profile.sweep.n_predict)
    )


def memory_points(profile: Profile, memory: str | None) -> tuple[MemoryPoint, ...]:
    if memory is not None:
        return parse_memory_list(memory)
    if profile.sweep is not None:
        return profile.sweep.memory
    raise ConfigError(
        f"profile {profile.name} declares no sweep: give the limits with "
        "--memory (e.g. 0.3,0.5,0.7,1.2 or 150MiB,200MiB,600MiB)"
    )


def estimate_seconds(trials: int, model_bytes: int, n_predict: int, k: int, n_experts: int) -> float:
    """The sweep's time at most: every trial's worst-case reads (appliance.runs.trial_time)
    for its generated tokens at ASSUMED_READ_BPS, plus start-up."""
    per_trial = trial_read_bytes(model_bytes, n_predict, k, n_experts) / ASSUMED_READ_BPS
    return trials * (TRIAL_OVERHEAD_S + per_trial) + TRIAL_OVERHEAD_S


def plan_sweep(
    profile: Profile,
    models_dir: Path,
    lock: Lock,
    *,
    memory: str | None,
    repeats: int | None,
    out: Path | None,
    dry_run: bool,
    max_hours: float,
    skip_digest: bool = False,
    image: str | None = None,
    gpu_index: int | None = None,
    progress: ProgressFn | None = None,
    resume: bool = False,
    assume_gpu: Gpu | None = None,
    skeleton: bool = False,
) -> tuple[SweepPlan, Any]:
    """Every check before anything starts, cheapest first: limits, length, then the run's."""
    profile = sweep_profile(profile)
    points = memory_points(profile, memory)
    path, file_bytes = locate_model(profile.model, models_dir, skeleton)
    # a skeleton stands for the pinned file: fractions and the estimate are of that file's size
    model_bytes = profile.model.bytes if skeleton and profile.model.bytes is not None else file_bytes
    floor = max(profile.limits.engine_min_memory, DOCKER_MIN_MEMORY)
    limits = resolve_limits(points, model_bytes, floor, profile.name)
    n_experts, k, per_layer = gguf_expert_layout(path)
    trials = sweep_plan(profile, limits, repeats)
    estimate = estimate_seconds(len(trials), model_bytes, profile.schedule.n_predict, k, n_experts)
    if estimate > max_hours * 3600:
        raise ConfigError(
            f"the sweep's {len(trials)} trials would take about "
            f"{estimate / 3600:.1f} h, more than --max-hours {max_hours:g}: "
            "sweep fewer limits or repeats, or raise --max-hours"
        )
    request = RunRequest(
        trials,
        out=out,
        dry_run=dry_run,
        skip_digest=skip_digest,
        image=image,
        gpu_index=gpu_index,
        resume=resume,
        located=(path, file_bytes),
        assume_gpu=assume_gpu,
        skeleton=skeleton,
    )
    prepared, client = prepare_run(profile, models_dir, lock, request, docker_client, progress)
    return SweepPlan(profile, prepared, points, limits, max(per_layer.values()), estimate), client


def print_grid(console: Console, plan: SweepPlan) -> None:
    table = Table(
        title=f"sweep of {plan.profile.name}: {len(plan.prepared.trials)} trials "
        f"in run order, after one disk probe"
    )
    table.add_column("limit")
    table.add_column("from")
    table.add_column("placement")
    for variant in plan.profile.variants:
        table.add_column(variant.name)
    by_limit: dict[int, dict[str, list[str]]] = {}
    placement: dict[int, str] = {}
    for trial in plan.prepared.trials:
        assert trial.memory is not None
        placement[trial.memory] = placement_text(plan.profile.placement, trial.placement) + (
            " (SKELETON)" if plan.prepared.model.digest_status == SKELETON else ""
        )
        by_limit.setdefault(trial.memory, {}).setdefault(trial.variant.name, []).append(str(trial.index))
    for limit in plan.limits:
        table.add_row(
            f"{format_size(limit.bytes)} ({limit.bytes} B)",
            limit.point,
            placement[limit.bytes],
            *[", ".join(by_limit[limit.bytes].get(v.name, [])) for v in plan.profile.variants],
        )
    console.print(table)
    console.print(
        f"disk probe: {plan.expert_bytes}-byte reads (one expert) and 4096-byte reads, "
        f"queue depth 1 and 8, under {format_size(max(plan.limits).bytes)}"
    )
    console.print(
        f"predicted time: about {plan.estimate_s / 60:.0f} min (at most; assumes "
        f"{ASSUMED_READ_BPS >> 20} MiB/s and no expert reuse)"
    )


def run_disk_probe(ctx: RunContext, plan: SweepPlan) -> None:
    """One probe container: cold cache, the largest limit, results under RUN/probe/."""
    probe_ctx = dataclasses.replace(
        ctx,
        engine=DiskProbeEngine(ctx.engine.image, plan.expert_bytes, PROBE_READS),
        trials_subdir=PROBE_DIR,
        trial_records=[],
    )
    ctx.console.print(f"disk probe: evicting model, cold random reads of {plan.expert_bytes} and 4096 bytes")
    try:
        record = run_trial(probe_ctx, plan.probe_trial())
    except TrialInterrupted:
        raise KeyboardInterrupt from None
    ctx.console.print(f"  probe {record['status']}")
