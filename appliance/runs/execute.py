"""Run a profile: one container per trial, cold page cache, exact limits, everything recorded.

Run directory (the bundle layout; `appliance.attest.bundle` signs it afterwards):

    RUN/run.json                      status complete|incomplete|failed, profile, times, version,
                                      executor (local, or the cluster and each trial's node)
    RUN/inputs/{profile.yaml,lock.json,schedule.json,model.json}
    RUN/trials/NNN-<variant>-r<repeat>/{trial.json,stdout.txt,stderr.txt,timing.json,
                                        output.txt,trace.moetrace,cgroup.json}
    RUN/results.json                  statistics over the trials (appliance.runs.stats)
    RUN/plots/*.png

Every file is written under a temporary name and renamed. A trial that is OOM-killed or fails
is recorded with its logs and the run goes on; Ctrl-C stops the running container, records
what was collected and marks the run incomplete. Trials run through an executor
(`appliance.runs.executor`): this machine by default, or a cluster; an incomplete run directory
can be resumed, running only the trials it lacks.
"""

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
from rich.console import Console

from appliance import __version__
from appliance.core import atomic
from appliance.core.errors import ConfigError
from appliance.host import pagecache
from appliance.host.cgroups import read_accounting
from appliance.images import labels as L
from appliance.runs import stats
from appliance.runs.executor import LocalExecutor, TrialExecutor
from appliance.runs.model_files import CheckedModel
from appliance.runs.plan import (
    ENGINE_OUTPUTS,
    EXIT_FILE,
    ContainerSettings,
    Engine,
    Trial,
    container_spec,
)
from appliance.runs.profile import Profile
from appliance.runs.status import RunStatus, TrialStatus

POLL_S = 0.05
Finalizer = Callable[[Path], None]
Prelude = Callable[["RunContext"], None]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class RunContext:
    """What every trial of one run shares."""

    client: docker.DockerClient
    profile: Profile
    engine: Engine
    model: CheckedModel
    settings: ContainerSettings
    run_dir: Path
    run_id: str
    console: Console
    trial_timeout_s: float | None = None
    trial_records: list[dict[str, Any]] = field(default_factory=list)
    trials_subdir: str = "trials"  # where run_trial writes: RUN/<trials_subdir>/<trial name>/


class TrialInterrupted(Exception):
    """Ctrl-C arrived during a trial; the partial trial record travels with it."""

    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.record = record


def _read_exit_file(results: Path) -> tuple[int, float] | None:
    """(engine exit status, engine wall seconds) from the wrapper, or None if it never wrote."""
    try:
        status, start_ns, end_ns = (results / EXIT_FILE).read_text().split()
    except (FileNotFoundError, ValueError):
        return None
    return int(status), (int(end_ns) - int(start_ns)) / 1e9


def _wait_for_engine(container: Any, results: Path, timeout_s: float | None) -> bool:
    """Until the wrapper reports the engine's exit, or the container itself is gone.
    False when the engine was still running after timeout_s (the caller stops it)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    polls = 0
    while not (results / EXIT_FILE).exists():
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
        polls += 1
        if polls % 20 == 0:
            container.reload()
            if container.status not in ("created", "running"):
                return True
    return True


def _collect(container: Any, record: dict[str, Any]) -> None:
    """cgroup (while the container lives), then stop it, then state and logs."""
    container.reload()
    pid = container.attrs["State"]["Pid"]
    if container.status == "running" and pid:
        try:
            record["cgroup"] = read_accounting(pid)
        except (FileNotFoundError, ProcessLookupError, KeyError) as exc:
            record["cgroup_error"] = f"cgroup unreadable: {exc}"
    else:
        record["cgroup_error"] = "container exited before its cgroup could be read"
    if container.status == "running":
        container.kill()
    container.wait()
    container.reload()
    state = container.attrs["State"]
    record["container_exit_code"] = state["ExitCode"]
    record["oom_killed"] = bool(state["OOMKilled"]) or bool(record.get("cgroup", {}).get("oom_kills"))
    record["stdout"] = container.logs(stdout=True, stderr=False)
    record["stderr"] = container.logs(stdout=False, stderr=True)


def _status(record: dict[str, Any]) -> TrialStatus:
    if record.get("interrupted"):
        return TrialStatus.INTERRUPTED
    if record.get("oom_killed"):
        return TrialStatus.OOM_KILLED
    if "timed_out_after_s" in record:
        return TrialStatus.TIMED_OUT
    if record.get("exit_code") == 0:
        return TrialStatus.OK
    return TrialStatus.FAILED


def engine_backend(timing_path: Path) -> str | None:
    """The backend the engine says it ran on (timing.json `backend`: CPU, CUDA), else None."""
    try:
        backend = json.loads(timing_path.read_text()).get("backend")
    except (OSError, ValueError, AttributeError):
        return None
    return backend if isinstance(backend, str) else None


def _write_trial(ctx: RunContext, trial: Trial, results: Path, record: dict[str, Any]) -> None:
    """Outputs and logs into the trial directory, trial.json last; the scratch dir goes."""
    trial_dir = ctx.run_dir / ctx.trials_subdir / trial.name
    trial_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, bool] = {}
    for stream in ("stdout", "stderr"):
        if stream in record:
            atomic.write_bytes(trial_dir / f"{stream}.txt", record.pop(stream))
        files[f"{stream}.txt"] = (trial_dir / f"{stream}.txt").exists()
    for name in ENGINE_OUTPUTS:
        if (results / name).is_file():
            atomic.move_into(results / name, trial_dir / name)
        files[name] = (trial_dir / name).exists()
    if "cgroup" in record:
        atomic.write_json(trial_dir / "cgroup.json", record["cgroup"])
    files["cgroup.json"] = (trial_dir / "cgroup.json").exists()
    record["files"] = files
    record["engine_backend"] = engine_backend(trial_dir / "timing.json")
    record["status"] = _status(record)
    atomic.write_json(trial_dir / "trial.json", record)
    for leftover in results.iterdir():
        leftover.unlink()
    results.rmdir()


def run_trial(ctx: RunContext, trial: Trial) -> dict[str, Any]:
    """One container from eviction to removal; returns the trial.json record."""
    results = ctx.run_dir / ".scratch" / trial.name
    results.mkdir(parents=True)  # the container runs as this user, so it can write here
    name = f"appliance-{ctx.run_id}-{trial.index:03d}"
    spec = container_spec(
        ctx.profile,
        ctx.engine,
        trial,
        ctx.settings,
        results,
        name,
        {L.RUN: ctx.run_id, L.RUN_TRIAL: trial.name},
    )
    record: dict[str, Any] = {
        "index": trial.index,
        "variant": trial.variant.name,
        "repeat": trial.repeat,
        "memory_limit": spec["mem_limit"],
        "container": {
            k: spec[k]
            for k in (
                "name",
                "command",
                "environment",
                "mem_limit",
                "memswap_limit",
                "network_mode",
                "read_only",
            )
        },
        "image": ctx.engine.image,
        "model_device": ctx.settings.block_device.key if ctx.settings.block_device else None,
    }
    container = None
    try:
        if ctx.profile.schedule.cold_cache:
            record["residency_before_evict"] = pagecache.residency(ctx.model.path).as_dict()
            record["residency_at_start"] = pagecache.evict_and_measure(ctx.model.path).as_dict()
        record["started_utc"] = utc_now()
        started = time.monotonic()
        container = ctx.client.containers.run(**spec)
        if not _wait_for_engine(container, results, ctx.trial_timeout_s):
            record["timed_out_after_s"] = ctx.trial_timeout_s
        record["host_wall_s"] = round(time.monotonic() - started, 6)
        record["ended_utc"] = utc_now()
        exited = _read_exit_file(results)
        if exited is not None:
            record["exit_code"], record["engine_wall_s"] = exited
        _collect(container, record)
        if exited is None:
            record["exit_code"] = record["container_exit_code"]
    except docker.errors.DockerException as exc:
        record["error"] = str(exc).splitlines()[0]
        record.setdefault("oom_killed", False)
        record.setdefault("exit_code", None)
    except KeyboardInterrupt:
        record["interrupted"] = True
        record.setdefault("ended_utc", utc_now())
        _stop_after_interrupt(ctx, name, record)
        _write_trial(ctx, trial, results, record)
        raise TrialInterrupted(record) from None
    finally:
        _remove(ctx.client, name)
    _write_trial(ctx, trial, results, record)
    return record


@dataclass(frozen=True)
class TrialJob:
    """The one-trial callable: everything a trial needs and nothing bound to this process, so
    it pickles and runs on this machine or on a cluster node alike.

    `job(trial, work_dir)` runs the trial against the local Docker engine and writes
    `work_dir/trials/<trial>/` (outputs pass through `work_dir/.scratch`); locally work_dir is
    the run directory.
    """

    profile: Profile
    engine: Engine
    model: CheckedModel
    settings: ContainerSettings
    run_id: str
    trial_timeout_s: float | None = None

    @classmethod
    def of(cls, ctx: RunContext) -> "TrialJob":
        return cls(ctx.profile, ctx.engine, ctx.model, ctx.settings, ctx.run_id, ctx.trial_timeout_s)

    def __call__(self, trial: Trial, work_dir: Path) -> dict[str, Any]:
        from appliance.host.docker import docker_client

        ctx = RunContext(
            docker_client(),
            self.profile,
            self.engine,
            self.model,
            self.settings,
            work_dir,
            self.run_id,
            Console(quiet=True),
            trial_timeout_s=self.trial_timeout_s,
        )
        return run_trial(ctx, trial)


def _stop_after_interrupt(ctx: RunContext, name: str, record: dict[str, Any]) -> None:
    try:
        container = ctx.client.containers.get(name)
    except docker.errors.NotFound:
        record["oom_killed"] = False
        return
    pid = container.attrs["State"]["Pid"]
    if container.status == "running" and pid:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, KeyError):
            record["cgroup"] = read_accounting(pid)
    if container.status == "running":
        container.kill()
    container.wait()
    container.reload()
    record["container_exit_code"] = container.attrs["State"]["ExitCode"]
    record["oom_killed"] = bool(container.attrs["State"]["OOMKilled"])
    record["stdout"] = container.logs(stdout=True, stderr=False)
    record["stderr"] = container.logs(stdout=False, stderr=True)


def _remove(client: docker.DockerClient, name: str) -> None:
    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(name).remove(force=True)


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    status: RunStatus
    trials: list[dict[str, Any]]
    results: dict[str, Any]
    plots: list[Path]


def write_inputs(
    run_dir: Path, profile: Profile, lock_raw: dict[str, Any], schedule: dict[str, Any], model: CheckedModel
) -> None:
    inputs = run_dir / "inputs"
    atomic.write_text(inputs / "profile.yaml", profile.source_text)
    atomic.write_json(inputs / "lock.json", lock_raw)
    atomic.write_json(inputs / "schedule.json", schedule)
    atomic.write_json(
        inputs / "model.json",
        {
            **model.manifest(),
            "pinned_bytes": profile.model.bytes,
            "pinned_sha256": profile.model.sha256,
            "source": profile.model.source,
            "synth": profile.model.synth,
        },
    )


def schedule_record(profile: Profile, trials: list[Trial]) -> dict[str, Any]:
    s = profile.schedule
    return {
        "profile": profile.name,
        "repeats": max(t.repeat for t in trials),
        "order": s.order,
        "n_predict": s.n_predict,
        "prompt": s.prompt,
        "seed": s.seed,
        "cold_cache": s.cold_cache,
        "trace": profile.trace,
        "variants": [{"name": v.name, "env": v.env, "args": list(v.args)} for v in profile.variants],
        "trials": [t.name for t in trials],
        **(
            {"memory_limits": sorted({t.memory for t in trials if t.memory is not None})}
            if any(t.memory is not None for t in trials)
            else {}
        ),
    }


def _run_record(
    ctx: RunContext, status: str, started: str, trials: list[Trial], extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "status": status,
        "profile": ctx.profile.name,
        "started_utc": started,
        "ended_utc": utc_now(),
        "appliance_version": __version__,
        "trial_count": len(trials),
        "trials_recorded": len(list((ctx.run_dir / "trials").glob("*/trial.json"))),
        "run_id": ctx.run_id,
        "engine": ctx.engine.identity(),
        "model_digest_status": ctx.model.digest_status,
        "limits": {"memory_bytes": ctx.profile.limits.memory, "memswap_bytes": ctx.profile.limits.memswap},
        "cgroup_version": ctx.settings.cgroup_version,
        "trial_timeout_s": ctx.trial_timeout_s,
        **extra,
    }


# Trials a resumed run starts again: never recorded, stopped by Ctrl-C, or left unrun because
# no cluster node could take them.
def needs_rerun(record: dict[str, Any] | None) -> bool:
    return (
        record is None or record.get("status") == TrialStatus.INTERRUPTED or bool(record.get("unscheduled"))
    )


# Written when a run directory is sealed (appliance.attest); a resumed run is sealed afresh.
SEALING_FILES = ("manifest.json", "attestation.dsse.json", "provenance.json")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def resume_point(ctx: RunContext, trials: list[Trial], lock_raw: dict[str, Any]) -> tuple[str, list[Trial]]:
    """(the run's original start time, the trials it still lacks) for an incomplete run
    directory of the same profile, lock and trial plan; refuses anything else in one line."""
    run_dir = ctx.run_dir
    run = _read_json(run_dir / "run.json")
    if not isinstance(run, dict) or "run_id" not in run:
        raise ConfigError(f"{run_dir}: no run.json with a run id: not a run directory to resume")
    if run.get("status") == RunStatus.COMPLETE:
        raise ConfigError(f"{run_dir} is complete: nothing to resume")
    inputs = run_dir / "inputs"
    schedule = _read_json(inputs / "schedule.json") or {}
    same = (
        (inputs / "profile.yaml").is_file()
        and (inputs / "profile.yaml").read_text() == ctx.profile.source_text
        and _read_json(inputs / "lock.json") == lock_raw
        and schedule.get("trials") == [t.name for t in trials]
    )
    if not same:
        raise ConfigError(
            f"{run_dir} was started with another profile, lock or trial plan "
            "(--repeats): resume it with the same ones, or start a new run"
        )
    ctx.run_id = str(run["run_id"])
    pending = [t for t in trials if needs_rerun(_read_json(run_dir / "trials" / t.name / "trial.json"))]
    for trial in pending:
        shutil.rmtree(run_dir / "trials" / trial.name, ignore_errors=True)
        shutil.rmtree(run_dir / ".scratch" / trial.name, ignore_errors=True)
    for name in SEALING_FILES:
        (run_dir / name).unlink(missing_ok=True)
    return str(run.get("started_utc") or utc_now()), pending


def execute_run(
    ctx: RunContext,
    trials: list[Trial],
    lock_raw: dict[str, Any],
    extra: dict[str, Any],
    finalize: Finalizer | None = None,
    before_trials: Prelude | None = None,
    executor: TrialExecutor | None = None,
    resume: bool = False,
) -> RunOutcome:
    """Every trial through the executor (this machine by default), then statistics, plots and
    the optional finalize hook.

    `before_trials(ctx)` runs once after the inputs are written and before the first trial
    (a sweep's disk probe); Ctrl-C there ends the run as incomplete, like during a trial.

    `finalize(run_dir)` runs last, for complete and incomplete runs alike (the pipeline seals
    the bundle there). With `resume`, ctx.run_dir is an incomplete run of the same plan and
    only its missing trials run.
    """
    executor = executor or LocalExecutor()
    if resume:
        started, pending = resume_point(ctx, trials, lock_raw)
        ctx.console.print(
            f"resuming {ctx.run_dir}: {len(trials) - len(pending)} of "
            f"{len(trials)} trials recorded, {len(pending)} to run"
        )
    else:
        started, pending = utc_now(), trials
        ctx.run_dir.mkdir(parents=True)
        write_inputs(ctx.run_dir, ctx.profile, lock_raw, schedule_record(ctx.profile, trials), ctx.model)
    job = TrialJob.of(ctx)
    atomic.write_json(
        ctx.run_dir / "run.json", _run_record(ctx, RunStatus.INCOMPLETE, started, trials, extra)
    )

    def starting(trial: Trial, where: str) -> None:
        ctx.console.print(f"trial {trial.name} on {where}: evicting model, starting container")

    status = RunStatus.COMPLETE
    try:
        if before_trials is not None:
            before_trials(ctx)
        for record in executor.run(job, pending, ctx.run_dir, on_start=starting):
            ctx.trial_records.append(record)
            ctx.console.print(_trial_line(record))
    except TrialInterrupted as stop:
        ctx.trial_records.append(stop.record)
        status = RunStatus.INCOMPLETE
    except KeyboardInterrupt:
        status = RunStatus.INCOMPLETE
    except BaseException:
        atomic.write_json(
            ctx.run_dir / "run.json",
            _run_record(ctx, RunStatus.FAILED, started, trials, {**extra, "executor": executor.describe()}),
        )
        raise
    finally:
        scratch = ctx.run_dir / ".scratch"
        if scratch.is_dir() and not any(scratch.iterdir()):
            scratch.rmdir()
    if status == RunStatus.INCOMPLETE:
        ctx.console.print(
            "[red]interrupted[/red]: running trials stopped, queued trials not started, run marked incomplete"
        )
    extra = {**extra, "executor": executor.describe()}
    results = stats.summarize(
        ctx.run_dir, [v.name for v in ctx.profile.variants], ctx.profile.schedule.n_predict
    )
    atomic.write_json(ctx.run_dir / "results.json", results)
    from appliance.runs import plots as run_plots  # matplotlib loads only when a run has plots to draw

    plots = run_plots.write_plots(ctx.run_dir, results, ctx.profile.limits.memory)
    atomic.write_json(ctx.run_dir / "run.json", _run_record(ctx, status, started, trials, extra))
    if finalize is not None:
        finalize(ctx.run_dir)
    return RunOutcome(ctx.run_dir, status, ctx.trial_records, results, plots)


def _trial_line(record: dict[str, Any]) -> str:
    status = record["status"]
    colour = {TrialStatus.OK: "green", TrialStatus.OOM_KILLED: "red", TrialStatus.FAILED: "red"}.get(
        status, "yellow"
    )
    wall = record.get("engine_wall_s")
    peak = record.get("cgroup", {}).get("peak_bytes")
    where = (
        f" on {record['node']['hostname']} ({record['node']['node_id'][:8]})"
        if isinstance(record.get("node"), dict)
        else ""
    )
    name = f"{record.get('index', 0):03d}-{record.get('variant')}-r{record.get('repeat')}"
    parts = [f"  trial {name}{where}: [{colour}]{status}[/{colour}] exit {record.get('exit_code')}"]
    if wall is not None:
        parts.append(f"wall {wall:.3f} s")
    if peak is not None:
        parts.append(f"peak {peak / 2**20:.1f} MiB")
    return ", ".join(parts)
