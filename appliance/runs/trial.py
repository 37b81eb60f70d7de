"""One trial: its container from eviction to removal (`TrialContainer`, whose `__exit__`
always removes it, with one collect step for every ending), and its directory, trial.json last.
`TrialJob` is the picklable one-trial callable a local or cluster executor runs."""

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
from rich.console import Console

from appliance.core import atomic
from appliance.core.digests import sha256_file
from appliance.core.errors import ConfigError
from appliance.core.strict_load import read_text
from appliance.host import pagecache
from appliance.host.cgroups import read_accounting
from appliance.host.containers import Kind, Lifecycle
from appliance.host.gpu_memory import GpuMemorySampler
from appliance.host.read_ahead import ReadAheadHold
from appliance.images import labels as L
from appliance.runs.device_server import (
    DeviceServer,
    DeviceServerError,
    joined,
    server_failure,
    server_name,
    server_spec,
)
from appliance.runs.model_files import CheckedModel, routes_record
from appliance.runs.plan import (
    EXIT_FILE,
    ContainerSettings,
    Engine,
    Trial,
    container_spec,
)
from appliance.runs.profile import STAND_IN_GPU, Profile
from appliance.runs.records import TrialRecord
from appliance.runs.run_dir import (
    ENGINE_OUTPUTS,
    STREAMS,
    TIMING_FILE,
    TRIALS_DIR,
    RunDir,
)
from appliance.runs.status import TrialStatus
from appliance.runs.timing import read_timing

POLL_S = 0.05
# After Ctrl-C: the longest the container's stop, collection and removal may take, whatever
# Docker does, so that the run records the trial and exits within 30 s.
INTERRUPT_STOP_S = 20.0


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
    trials_subdir: str = TRIALS_DIR  # where run_trial writes: RUN/<trials_subdir>/<trial name>/


class TrialInterrupted(Exception):
    """Ctrl-C arrived during a trial; the partial trial record travels with it."""

    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.record = record


def _read_exit_file(results: Path) -> tuple[int, float] | None:
    """(engine exit status, engine wall seconds) from the wrapper, or None if it never wrote."""
    try:
        status, start_ns, end_ns = read_text(results / EXIT_FILE, max_bytes=256).split()
    except (ConfigError, ValueError):
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


class TrialContainer(Lifecycle):
    """One trial's container: the host.containers lifecycle (hardened start, removal by id when
    the `with` block ends, after success, an error or Ctrl-C alike). `collect` is the one collect
    step for every ending: the cgroup while the container lives, then stop it, then its state
    and logs."""

    name: str

    def __init__(self, client: docker.DockerClient, name: str) -> None:
        super().__init__(client, Kind.TRIAL, name)

    def collect(self, record: dict[str, Any]) -> None:
        """Into record: cgroup accounting (or cgroup_error), container_exit_code, oom_killed,
        stdout and stderr. A container that never started leaves oom_killed False."""
        try:
            container = self.client.containers.get(self.name)
        except docker.errors.NotFound:
            record["oom_killed"] = False
            return
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

    def stop_after_interrupt(self, record: dict[str, Any], seconds: float = INTERRUPT_STOP_S) -> None:
        """After Ctrl-C: collect, stop and remove the container within `seconds`; when Docker
        has not answered by then, record what may be left (`interrupt_cleanup`) and go on.
        A second Ctrl-C meanwhile exits at once (status 130), saying what may be left."""

        collected: dict[str, Any] = {}  # filled by the stopping thread, kept only if it ended

        def stop() -> None:
            with contextlib.suppress(docker.errors.DockerException):
                self.collect(collected)
            self.remove()

        try:
            finished = within(stop, seconds)
        except KeyboardInterrupt:
            left = f"container {self.name} may still exist (docker rm -f {self.name})"
            exit_now(f"{left} and its trial has no record")
        self.removed = True
        if finished:
            record.update(collected)
        else:
            record["interrupt_cleanup"] = (
                f"Docker did not stop and remove container {self.name} within {seconds:.0f} s: "
                f"it may be left (docker rm -f {self.name})"
            )


def exit_now(left: str) -> None:
    """A second Ctrl-C while the first is being handled: say what may be left, exit 130 now
    (run.json already says incomplete: it does from the moment a run starts)."""
    sys.stderr.write(f"second Ctrl-C: exiting now; {left}; the run stays incomplete\n")
    sys.stderr.flush()
    os._exit(130)


def within(step: Callable[[], None], seconds: float) -> bool:
    """Run step in a daemon thread; True when it ended (however) within `seconds`. The wait is
    interruptible: Ctrl-C reaches the caller at once."""
    done = threading.Event()

    def target() -> None:
        try:
            with contextlib.suppress(Exception):  # what a failed stop could not collect is absent
                step()
        finally:
            done.set()

    threading.Thread(target=target, name="trial-stop", daemon=True).start()
    return done.wait(seconds)


def _status(record: dict[str, Any]) -> TrialStatus:
    if record.get("interrupted"):
        return TrialStatus.INTERRUPTED
    if record.get("oom_killed"):
        return TrialStatus.OOM_KILLED
    if "timed_out_after_s" in record:
        return TrialStatus.TIMED_OUT
    if record.get("exit_code") != 0 or server_failure(record.get("device_server") or {}):
        return TrialStatus.FAILED
    if (record.get("gpu_memory") or {}).get("over_budget"):
        return TrialStatus.OVER_BUDGET  # the GPU held more than limits.vram: the VRAM analogue of OOM
    return TrialStatus.OK


def _load_seconds(results: Path) -> float | None:
    """The engine's load time (its timing.json `load_s`), for the GPU sample at load end."""
    timing = read_timing(results / TIMING_FILE)
    return timing.load_s if timing is not None else None


def engine_backend(timing_path: Path) -> str | None:
    """The backend the engine says it ran on (timing.json `backend`: CPU, CUDA), else None."""
    timing = read_timing(timing_path)
    return timing.backend if timing is not None else None


def _write_trial(ctx: RunContext, trial: Trial, results: Path, record: dict[str, Any]) -> None:
    """Outputs and logs into the trial directory, trial.json last (through `TrialRecord`:
    `record`, the draft the trial filled, ends as exactly what was written); the scratch dir
    goes."""
    trial_dir = RunDir(ctx.run_dir).trial(trial.name, ctx.trials_subdir)
    trial_dir.path.mkdir(parents=True, exist_ok=True)
    files: dict[str, bool] = {}
    for stream in STREAMS:
        path = trial_dir.stream(stream)
        if stream in record:
            atomic.write_bytes(path, record.pop(stream))
        files[path.name] = path.exists()
    for name in ENGINE_OUTPUTS:
        if (results / name).is_file():
            atomic.move_into(results / name, trial_dir.path / name)
        files[name] = (trial_dir.path / name).exists()
    if "cgroup" in record:
        atomic.write_json(trial_dir.cgroup, record["cgroup"])
    files[trial_dir.cgroup.name] = trial_dir.cgroup.exists()
    record["files"] = files
    record["engine_backend"] = engine_backend(trial_dir.timing)
    record["status"] = _status(record)
    typed = TrialRecord.from_json(record, str(trial_dir.record_file))  # a key it lacks is a bug here
    atomic.write_json(trial_dir.record_file, typed.to_json())
    record.clear()
    record.update(typed.to_json())
    for leftover in results.iterdir():
        leftover.unlink()
    results.rmdir()


def base_record(trial: Trial, profile: Profile) -> dict[str, Any]:
    """What every trial.json starts with (`TrialRecord`'s keys): the trial's name (its
    directory's), place and limit."""
    return {
        "name": trial.name,
        "index": trial.index,
        "variant": trial.variant.name,
        "repeat": trial.repeat,
        "memory_limit": trial.memory_limit(profile),
    }


def _device_bytes(ctx: RunContext) -> int:
    assert ctx.profile.limits.vram is not None, "a stand-in profile has limits.vram (runs.profile)"
    return ctx.profile.limits.vram


def _with_device(
    ctx: RunContext, device: DeviceServer, spec: dict[str, Any], record: dict[str, Any]
) -> dict[str, Any]:
    """Start the trial's stand-in device and return the engine's spec joined to it."""
    assert device.name is not None
    labels = {L.RUN: ctx.run_id, L.RUN_TRIAL: str(record["name"])}
    device.start_ready(
        server_spec(ctx.engine.image, device.name, labels, _device_bytes(ctx), ctx.settings.user)
    )
    joined_spec = joined(spec, device.name)
    record["container"]["network_mode"] = joined_spec["network_mode"]
    return joined_spec


def run_trial(ctx: RunContext, trial: Trial) -> dict[str, Any]:
    """One container from eviction to removal; returns the trial.json record."""
    results = RunDir(ctx.run_dir).scratch_for(trial.name)
    results.mkdir(parents=True)  # the container runs as this user, so it can write here
    name = f"appliance-{ctx.run_id}-{trial.index:03d}"
    future = RunDir(ctx.run_dir).trial(trial.future, ctx.trials_subdir).trace if trial.future else None
    spec = container_spec(
        ctx.profile,
        ctx.engine,
        trial,
        ctx.settings,
        results,
        name,
        {L.RUN: ctx.run_id, L.RUN_TRIAL: trial.name},
        future,
    )
    record: dict[str, Any] = {
        **base_record(trial, ctx.profile),
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
    if future is not None:
        if not future.is_file():
            record |= {
                "error": f"no route trace from trial {trial.future}, this trial's --future: "
                "that trial failed or left none",
                "oom_killed": False,
                "exit_code": None,
            }
            _write_trial(ctx, trial, results, record)
            return record
        record["future"] = {"trial": trial.future, "sha256": sha256_file(future)}
    if trial.variant.routes is not None:  # the file the engine forces its routing from (/models)
        record["routes"] = routes_record(trial.variant.routes, ctx.settings.models_dir, trial.variant.name)
    stand_in = DeviceServer(ctx.client, server_name(name)) if ctx.profile.gpu == STAND_IN_GPU else None
    block = ctx.settings.block_device
    read_ahead = ReadAheadHold(block.key if block else None, ctx.profile.limits.read_ahead_to_set_kb)
    with stand_in or contextlib.nullcontext(), TrialContainer(ctx.client, name) as box, read_ahead:
        if read_ahead.in_force_kb is not None:
            record["model_device_read_ahead_kb"] = read_ahead.in_force_kb
            record["model_device_read_ahead_mode"] = read_ahead.mode
        try:
            if ctx.profile.schedule.cold_cache:
                record["residency_before_evict"] = pagecache.residency(ctx.model.path).as_dict()
                record["residency_at_start"] = pagecache.evict_and_measure(ctx.model.path).as_dict()
            if stand_in is not None:
                spec = _with_device(ctx, stand_in, spec, record)
            record["started_utc"] = utc_now()
            started = time.monotonic()
            gpus = ctx.settings.gpu_device_ids
            with GpuMemorySampler(int(gpus[0]) if gpus else None) as gpu_memory:
                container = box.start(spec)
                if not _wait_for_engine(container, results, ctx.trial_timeout_s):
                    record["timed_out_after_s"] = ctx.trial_timeout_s
            record["gpu_memory"] = gpu_memory.record(_load_seconds(results), ctx.profile.limits.vram)
            if stand_in is not None:
                record["device_server"] = stand_in.collect(_device_bytes(ctx))
                failure = server_failure(record["device_server"])
                if failure is not None:
                    record["error"] = failure
            record["host_wall_s"] = round(time.monotonic() - started, 6)
            record["ended_utc"] = utc_now()
            exited = _read_exit_file(results)
            if exited is not None:
                record["exit_code"], record["engine_wall_s"] = exited
            box.collect(record)
            if exited is None:
                record["exit_code"] = record["container_exit_code"]
        except docker.errors.DockerException as exc:
            record["error"] = str(exc).splitlines()[0]
            record.setdefault("oom_killed", False)
            record.setdefault("exit_code", None)
        except DeviceServerError as exc:
            record["error"] = str(exc)
            record["device_server"] = stand_in.collect(_device_bytes(ctx)) if stand_in is not None else None
            record.setdefault("oom_killed", False)
            record.setdefault("exit_code", None)
        except KeyboardInterrupt:
            read_ahead.restore()  # first: a second Ctrl-C while the container stops exits at once
            _record_restored(record, read_ahead)
            record["interrupted"] = True
            record.setdefault("ended_utc", utc_now())
            box.stop_after_interrupt(record)
            record.setdefault("oom_killed", False)
            _write_trial(ctx, trial, results, record)
            raise TrialInterrupted(record) from None
    _record_restored(record, read_ahead)
    _write_trial(ctx, trial, results, record)
    return record


def _record_restored(record: dict[str, Any], read_ahead: ReadAheadHold) -> None:
    if read_ahead.restored_kb is not None:
        record["model_device_read_ahead_restored_kb"] = read_ahead.restored_kb


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
