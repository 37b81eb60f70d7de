"""The run's records as typed classes: trial.json, inputs/schedule.json and run.json, every key
each may hold spelled once.

Written by `appliance.runs.trial` (a trial that ran, or one that could not start) and by the
cluster executor (a trial no node could take, or one interrupted on its node). Importing this
module loads neither docker nor ray: the verifier and the analyses may read records with it.

Only index, variant, repeat and status are required: records written before a field existed
(name and memory_limit came with the run-directory object, attempts and node with the
cluster) still read, and so bundles sealed then still render. run.json (`RunRecord`) requires
the four fields the attestation signs (status, profile and the two times) for the same reason.
"""

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from appliance.core.records import Record
from appliance.host.read_ahead import ReadAheadMode
from appliance.runs.status import RunStatus, TrialStatus


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
    model_device_read_ahead_kb: int | None = None  # that device's read-ahead during the trial
    model_device_read_ahead_mode: ReadAheadMode | None = None  # set by the runner, or observed
    model_device_read_ahead_restored_kb: int | None = None  # written back after the trial (set)
    future: dict[str, Any] | None = None  # the trial whose route trace this one replays, its sha256
    routes: dict[str, Any] | None = None  # the routes file the engine forced its routing from
    residency_before_evict: dict[str, Any] | None = None  # the model's page-cache residency
    residency_at_start: dict[str, Any] | None = None
    started_utc: str | None = None
    timed_out_after_s: float | None = None
    gpu_memory: dict[str, Any] | None = None  # appliance.host.gpu_memory's samples
    device_server: dict[str, Any] | None = None  # the stand-in device's (appliance.runs.device_server)
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


@dataclass(frozen=True)
class LimitUsed(Record):
    """One limit some trials ran under (run.json `limits.trials[]`), with the sweep point that
    asked for it."""

    memory_bytes: int
    memswap_bytes: int
    point: str | None = None


@dataclass(frozen=True)
class RunLimits(Record):
    """run.json `limits`: `memory_bytes` and `memswap_bytes` name the one limit every trial
    shares, and are null when the trials ran under several (a sweep)."""

    WRITES_NULL: ClassVar[frozenset[str]] = frozenset({"memory_bytes", "memswap_bytes"})

    memory_bytes: int | None
    memswap_bytes: int | None
    trials: tuple[LimitUsed, ...] | None = None  # every limit used, ascending


@dataclass(frozen=True)
class Placement(Record):
    """run.json `placement`: the profile's placement mode and VRAM budget, the GPU the run
    planned for (null without one) and the warnings said before the trials."""

    WRITES_NULL: ClassVar[frozenset[str]] = frozenset({"vram_budget_bytes", "gpu"})

    mode: str
    vram_budget_bytes: int | None
    gpu: dict[str, Any] | None  # appliance.host.gpu.Gpu.record()
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class SweepRecord(Record):
    """run.json `sweep`: the limits as written and as the trials ran under them."""

    memory: tuple[str, ...]  # the sweep points as written
    limits: tuple[int, ...]  # bytes, ascending
    labels: tuple[str, ...]  # each limit as the tables name it
    n_predict: int
    probe_block_bytes: int  # the disk probe's read size: one expert's bytes


@dataclass(frozen=True)
class ResumedFrom(Record):
    """One bundle a resumed run carried trials over from (run.json `resumed_from[]`)."""

    WRITES_NULL: ClassVar[frozenset[str]] = frozenset({"bundle_digest", "signer"})

    bundle_digest: str | None
    attestation_sha256: str
    signer: str | None  # the key id that signed it; null when unsigned
    carried_over: tuple[str, ...]  # the trials kept from it


@dataclass(frozen=True)
class RunSetup:
    """What the workflow knows of a run before its first trial: its run.json fields beyond the
    runner's own (see `RunRecord`); a bare runner (tests) passes none."""

    target: str | None = None
    stand_in: str | None = None
    image_id: str | None = None
    placement: Placement | None = None
    sweep: SweepRecord | None = None

    def fields(self) -> dict[str, Any]:
        """Its fields by name: each is the `RunRecord` field of that name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class RunRecord(Record):
    """run.json, written when the run starts (incomplete), when it ends (complete, incomplete)
    and when the runner fails (failed). trial_timeout_s is written as null when there is none;
    stand_in is null for an image of the canonical source, and written (null or not) with the
    workflow's fields (`RunSetup`, which always names the target): a bare runner records no
    source, and provenance then takes it from the image's labels. Read strictly like
    trial.json: a key the class lacks is refused by name."""

    WRITES_NULL: ClassVar[frozenset[str]] = frozenset({"trial_timeout_s"})
    # the fields the attestation's predicate signs (`run`), compared by the verifier
    SIGNED: ClassVar[tuple[str, ...]] = ("status", "profile", "started_utc", "ended_utc")

    status: RunStatus
    profile: str
    started_utc: str
    ended_utc: str
    appliance_version: str | None = None
    trial_count: int | None = None
    trials_recorded: int | None = None
    run_id: str | None = None
    engine: dict[str, Any] | None = None  # the engine's identity: kind, image (and its own fields)
    model_digest_status: str | None = None
    limits: RunLimits | None = None
    cgroup_version: int | None = None
    trial_timeout_s: float | None = None
    target: str | None = None
    stand_in: str | None = None
    image_id: str | None = None
    placement: Placement | None = None
    sweep: SweepRecord | None = None
    executor: dict[str, Any] | None = None  # the executor's describe(): local, or the cluster
    resumed_from: tuple[ResumedFrom, ...] | None = None  # oldest first

    # run.json's fields collected into provenance.json `run`
    PROVENANCE: ClassVar[tuple[str, ...]] = (
        "status",
        "profile",
        "started_utc",
        "ended_utc",
        "appliance_version",
        "trial_count",
        "trials_recorded",
        "run_id",
        "target",
        "stand_in",
        "image_id",
        "engine",
        "limits",
        "model_digest_status",
        "cgroup_version",
        "executor",
        "resumed_from",
    )

    @property
    def records_source(self) -> bool:
        """Whether run.json says which source the image was built from (`stand_in`)."""
        return self.target is not None

    def to_json(self) -> dict[str, Any]:
        written = super().to_json()
        if self.records_source and self.stand_in is None:
            written = {**written, "stand_in": None}
        return written

    def provenance(self) -> dict[str, Any]:
        """provenance.json `run`: the fields of `PROVENANCE` the record holds."""
        written = self.to_json()
        return {key: written[key] for key in self.PROVENANCE if key in written}

    def signed(self) -> dict[str, Any]:
        """The fields the attestation's predicate signs (`run`)."""
        written = self.to_json()
        return {key: written.get(key) for key in self.SIGNED}
