"""The trial record (trial.json) as a typed class: every key it may hold, spelled once.

Written by `appliance.runs.trial` (a trial that ran, or one that could not start) and by the
cluster executor (a trial no node could take, or one interrupted on its node). Importing this
module loads neither docker nor ray: the verifier and the analyses may read records with it.

Only index, variant, repeat and status are required: records written before a field existed
(name and memory_limit came with the run-directory object, attempts and node with the
cluster) still read, and so bundles sealed then still render.
"""

from dataclasses import dataclass
from typing import Any, ClassVar

from appliance.core.records import Record
from appliance.runs.status import TrialStatus


@dataclass(frozen=True)
class Attempt(Record):
    """One start of a trial on a cluster node (trial.json `attempts[]`): how it ended, with
    the trial's status, or the error that lost it."""

    node_id: str
    started_utc: str
    ended_utc: str
    status: TrialStatus | None = None
    error: str | None = None


@dataclass(frozen=True)
class TrialRecord(Record):
    """trial.json. Keys the runner fills as the trial goes, in that order; a key is absent
    when that step did not happen; exit_code, model_device and engine_backend are written as
    null when unknown (no exit status, the model on no block device, no backend reported)."""

    WRITES_NULL: ClassVar[frozenset[str]] = frozenset({"exit_code", "model_device", "engine_backend"})

    index: int
    variant: str
    repeat: int
    status: TrialStatus
    name: str | None = None  # the trial directory's name
    memory_limit: int | None = None  # bytes: the container's memory limit
    container: dict[str, Any] | None = None  # name, command, environment, limits, network, read-only
    image: str | None = None
    model_device: str | None = None  # MAJ:MIN of the block device holding the model
    model_device_read_ahead_kb: int | None = None  # that device's read-ahead (a fault's window)
    future: dict[str, Any] | None = None  # the trial whose route trace this one replays, its sha256
    routes: dict[str, Any] | None = None  # the routes file the engine forced its routing from
    residency_before_evict: dict[str, Any] | None = None  # the model's page-cache residency
    residency_at_start: dict[str, Any] | None = None
    started_utc: str | None = None
    timed_out_after_s: float | None = None
    gpu_memory: dict[str, Any] | None = None  # appliance.host.gpu_memory's samples
    host_wall_s: float | None = None
    ended_utc: str | None = None
    exit_code: int | None = None  # the engine's (else the container's) exit status
    engine_wall_s: float | None = None
    cgroup: dict[str, Any] | None = None  # appliance.host.cgroups' accounting, as in cgroup.json
    cgroup_error: str | None = None
    container_exit_code: int | None = None
    oom_killed: bool | None = None
    interrupted: bool | None = None
    interrupt_cleanup: str | None = None  # what Docker may have left after Ctrl-C
    error: str | None = None  # why the trial did not run (or did not finish) as planned
    files: dict[str, Any] | None = None  # file name -> whether the trial directory holds it
    engine_backend: str | None = None  # timing.json `backend`: CPU, CUDA
    unscheduled: bool | None = None  # the cluster gave up on it: no node took it
    node: dict[str, Any] | None = None  # the cluster node it ran on
    attempts: tuple[Attempt, ...] | None = None  # every start on a cluster node


@dataclass(frozen=True)
class ScheduledVariant(Record):
    """One variant as the schedule records it (inputs/schedule.json `variants[]`)."""

    name: str
    env: dict[str, Any]
    args: tuple[str, ...]
    future: str | None = None  # the earlier variant whose route trace is this one's --future
    routes: str | None = None  # the routes file in the models directory (--routes-from)


@dataclass(frozen=True)
class ScheduleRecord(Record):
    """inputs/schedule.json: the schedule the trials ran, in the order of `trials`."""

    profile: str
    repeats: int
    order: str
    n_predict: int
    prompt: str
    seed: int
    cold_cache: bool
    variants: tuple[ScheduledVariant, ...]
    trials: tuple[str, ...]
    trace: bool | None = None
    memory_limits: tuple[int, ...] | None = None  # a sweep's limits, ascending
