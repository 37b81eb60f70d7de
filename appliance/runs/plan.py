"""The trial plan of a run and the exact `docker run` parameters of each trial.

Everything here is pure: no Docker calls, so `appliance run --dry-run` prints exactly what a
real run would start. The engine command line is built in one place (`Engine.argv`); the
runner wraps it in a small shell that records the engine's exit status and times and then
keeps the container alive, so its cgroup can be read after the engine has exited.
"""

import dataclasses
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from appliance.core.errors import ConfigError
from appliance.core.limits import MAX_REPEATS
from appliance.host.cgroups import BLKIO_UNLIMITED_BPS, BlockDevice
from appliance.host.containers import Kind, hardened, hardening_cli_args
from appliance.runs import device_server
from appliance.runs.memory_points import SweepLimit, limit_label
from appliance.runs.profile import STAND_IN_GPU, Profile, Variant
from appliance.runs.run_dir import OUTPUT_FILE, TIMING_FILE, TRACE_FILE

MODELS_MOUNT = "/models"
RESULTS_MOUNT = "/results"
FUTURE_MOUNT = "/future"  # an earlier trial's route trace, read-only: a variant's --future
SCRATCH_TMPFS = {"/tmp": "rw,size=16m,mode=1777"}  # tmpfs pages count against the limit
EXIT_FILE = ".engine-exit"
# Runs the engine, records "status start_ns end_ns", then idles until the runner has read
# the cgroup and kills the container (the idle bound only matters if the runner died).
WRAPPER = (
    's=$(date +%s%N); "$@"; rc=$?; e=$(date +%s%N); '
    f'echo "$rc $s $e" > {RESULTS_MOUNT}/{EXIT_FILE}.tmp && '
    f"mv {RESULTS_MOUNT}/{EXIT_FILE}.tmp {RESULTS_MOUNT}/{EXIT_FILE}; exec sleep 86400"
)


class Engine(Protocol):
    """What the runner starts in each trial: an image and a command line per variant."""

    @property
    def image(self) -> str: ...

    def argv(self, profile: Profile, variant: Variant, placement: tuple[str, ...] = ()) -> list[str]: ...

    def env(self, profile: Profile, variant: Variant) -> dict[str, str]: ...

    def identity(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class LlamaMoeTraceEngine:
    """The patched llama.cpp tool `llama-moe-trace` in the engine image."""

    image: str

    def argv(self, profile: Profile, variant: Variant, placement: tuple[str, ...] = ()) -> list[str]:
        """Greedy decoding of exactly n_predict tokens (EOS ignored), so every variant and
        repeat does the same work; the schedule's seed is recorded, greedy needs none.
        `placement` (the trial's, from the profile's placement) comes before the profile's own
        arguments."""
        s = profile.schedule
        argv = [
            "llama-moe-trace",
            "-m",
            f"{MODELS_MOUNT}/{profile.model.file}",
            "-p",
            s.prompt,
            "-n",
            str(s.n_predict),
            "--ignore-eos",
            "--timings",
            f"{RESULTS_MOUNT}/{TIMING_FILE}",
            "--text",
            f"{RESULTS_MOUNT}/{OUTPUT_FILE}",
        ]
        if profile.model.sha256:
            argv += ["--model-sha256", profile.model.sha256]
        if profile.trace:
            argv += ["-o", f"{RESULTS_MOUNT}/{TRACE_FILE}"]
        else:
            argv += ["--no-trace"]
        if variant.future is not None:
            argv += ["--future", f"{FUTURE_MOUNT}/{TRACE_FILE}"]
        if variant.routes is not None:
            argv += ["--routes-from", f"{MODELS_MOUNT}/{variant.routes}"]
        if profile.gpu == STAND_IN_GPU:
            argv += device_server.engine_args()
        if variant.no_op_offload(profile.gpu):
            argv += ["--no-op-offload"]
        return argv + list(placement) + list(profile.engine_args) + list(variant.args)

    def env(self, profile: Profile, variant: Variant) -> dict[str, str]:
        return dict(variant.env)

    def identity(self) -> dict[str, Any]:
        return {"kind": "llama-moe-trace", "image": self.image}


@dataclass(frozen=True)
class CommandEngine:
    """Any command per variant in any image: exercises limits, mounts and accounting without
    the engine (the model is at /models/<file>, outputs go under /results)."""

    image: str
    commands: dict[str, list[str]]

    def argv(self, profile: Profile, variant: Variant, placement: tuple[str, ...] = ()) -> list[str]:
        return list(self.commands[variant.name])

    def env(self, profile: Profile, variant: Variant) -> dict[str, str]:
        return dict(variant.env)

    def identity(self) -> dict[str, Any]:
        return {"kind": "command", "image": self.image, "commands": self.commands}


@dataclass(frozen=True)
class DiskProbeEngine:
    """`llama-moe-trace --probe-disk`: cold random reads of the model file at the expert size
    and at one page, queue depths 1 and 8, in the engine image and under a trial's limits."""

    image: str
    block_bytes: int
    reads: int = 64

    def argv(self, profile: Profile, variant: Variant, placement: tuple[str, ...] = ()) -> list[str]:
        return [
            "llama-moe-trace",
            "--probe-disk",
            f"{MODELS_MOUNT}/{profile.model.file}",
            "--probe-block",
            str(self.block_bytes),
            "--probe-reads",
            str(self.reads),
            "--timings",
            f"{RESULTS_MOUNT}/{TIMING_FILE}",
        ]

    def env(self, profile: Profile, variant: Variant) -> dict[str, str]:
        return {}

    def identity(self) -> dict[str, Any]:
        return {
            "kind": "llama-moe-trace --probe-disk",
            "image": self.image,
            "block_bytes": self.block_bytes,
            "reads": self.reads,
        }


@dataclass(frozen=True)
class Trial:
    index: int  # 1-based position in the run order
    variant: Variant
    repeat: int  # 1-based
    memory: int | None = None  # a sweep's limit for this trial; None: the profile's
    point: str | None = None  # the sweep point, as written, that asked for `memory`
    future: str | None = None  # the earlier trial whose route trace is this one's --future
    placement: tuple[str, ...] = ()  # engine arguments for where the model lives (prepare_run)

    @property
    def name(self) -> str:
        if self.memory is None:
            return f"{self.index:03d}-{self.variant.name}-r{self.repeat}"
        return f"{self.index:03d}-{limit_label(self.memory)}-{self.variant.name}-r{self.repeat}"

    def memory_limit(self, profile: Profile) -> int:
        return profile.limits.memory if self.memory is None else self.memory

    def memswap_limit(self, profile: Profile) -> int:
        """Docker's memswap_limit for this trial: its memory limit plus the profile's swap."""
        return self.memory_limit(profile) + profile.limits.swap


def repeat_count(profile: Profile, repeats: int | None) -> int:
    """--repeats, checked (the one place), or the schedule's."""
    if repeats is None:
        return profile.schedule.repeats
    if not 1 <= repeats <= MAX_REPEATS:
        raise ConfigError(f"--repeats must be from 1 to {MAX_REPEATS}")
    return repeats


def trial_plan(profile: Profile, repeats: int | None = None) -> list[Trial]:
    """Variants x repeats; interleaved runs every variant once per round (A B A B ...)."""
    count = repeat_count(profile, repeats)
    if profile.schedule.order == "interleaved":
        pairs = [(r, v) for r in range(1, count + 1) for v in profile.variants]
    else:
        pairs = [(r, v) for v in profile.variants for r in range(1, count + 1)]
    return with_futures([Trial(i, v, r) for i, (r, v) in enumerate(pairs, start=1)])


def sweep_plan(profile: Profile, limits: list[SweepLimit], repeats: int | None = None) -> list[Trial]:
    """Every variant at every limit within each repeat. Interleaved: within a repeat the limits
    go round in turn, every variant at each (L1 A B, L2 A B, ...), and each later repeat starts
    one limit further on, so no limit always runs first after the probe. Blocked: all repeats of
    one (limit, variant) pair together."""
    count = repeat_count(profile, repeats)
    if profile.schedule.order == "interleaved":
        triples = [
            (r, limits[(i + r - 1) % len(limits)], v)
            for r in range(1, count + 1)
            for i in range(len(limits))
            for v in profile.variants
        ]
    else:
        triples = [(r, m, v) for m in limits for v in profile.variants for r in range(1, count + 1)]
    return with_futures([Trial(i, v, r, m.bytes, m.point) for i, (r, m, v) in enumerate(triples, start=1)])


def with_futures(trials: list[Trial]) -> list[Trial]:
    """Each trial of a variant with a `future` names the trial of that variant at the same limit
    and repeat; the profile puts that variant earlier, so in both orders its trial runs first."""
    by_key = {(t.memory, t.repeat, t.variant.name): t for t in trials}
    out = []
    for trial in trials:
        if trial.variant.future is not None:
            source = by_key[(trial.memory, trial.repeat, trial.variant.future)]
            assert source.index < trial.index, "a future's trial runs first"
            trial = dataclasses.replace(trial, future=source.name)
        out.append(trial)
    return out


@dataclass(frozen=True)
class ContainerSettings:
    """Host facts that shape every trial's container."""

    models_dir: Path
    block_device: BlockDevice | None
    cgroup_version: int
    gpu_device_ids: tuple[str, ...] | None  # None: no GPU request
    user: str = f"{os.getuid()}:{os.getgid()}"


def container_spec(
    profile: Profile,
    engine: Engine,
    trial: Trial,
    settings: ContainerSettings,
    results_dir: Path,
    name: str,
    labels: dict[str, str],
    future_trace: Path | None = None,
) -> dict[str, Any]:
    """The trial kind's configure hook (host.containers): the hardened keyword arguments for
    docker-py's `containers.create` of one trial (detached), in the order the dry run prints
    them; `future_trace` (the trace of `trial.future`) is mounted read-only at FUTURE_MOUNT."""
    argv = engine.argv(profile, trial.variant, trial.placement)
    spec = hardened(
        Kind.TRIAL,
        {
            "image": engine.image,
            "command": ["/bin/sh", "-c", WRAPPER, "engine", *argv],
            "environment": engine.env(profile, trial.variant),
            "name": name,
            "labels": labels,
            "detach": True,
            "user": settings.user,
            "mem_limit": trial.memory_limit(profile),
            "memswap_limit": trial.memswap_limit(profile),
        },
    )
    spec["tmpfs"] = dict(SCRATCH_TMPFS)
    spec["volumes"] = {
        str(settings.models_dir.resolve()): {"bind": MODELS_MOUNT, "mode": "ro"},
        str(results_dir.resolve()): {"bind": RESULTS_MOUNT, "mode": "rw"},
    }
    if future_trace is not None:
        spec["volumes"][str(future_trace.resolve())] = {"bind": f"{FUTURE_MOUNT}/{TRACE_FILE}", "mode": "ro"}
    if settings.block_device is not None and settings.cgroup_version == 1:
        spec["device_read_bps"] = [{"Path": settings.block_device.node, "Rate": BLKIO_UNLIMITED_BPS}]
    if settings.gpu_device_ids is not None:
        spec["device_requests"] = [
            {"Driver": "nvidia", "DeviceIDs": list(settings.gpu_device_ids), "Capabilities": [["gpu"]]}
        ]
    return spec


def docker_cli_equivalent(spec: dict[str, Any]) -> str:
    """The `docker run` command line a person would type for the same container."""
    args = [
        "docker",
        "run",
        "-d",
        "--name",
        spec["name"],
        "--user",
        spec["user"],
        "--memory",
        str(spec["mem_limit"]),
        "--memory-swap",
        str(spec["memswap_limit"]),
        *hardening_cli_args(spec),
    ]
    for path, options in spec.get("tmpfs", {}).items():
        args += ["--tmpfs", f"{path}:{options}"]
    for host, bind in spec.get("volumes", {}).items():
        args += ["-v", f"{host}:{bind['bind']}:{bind['mode']}"]
    for rule in spec.get("device_read_bps", []):
        args += ["--device-read-bps", f"{rule['Path']}:{rule['Rate']}"]
    for request in spec.get("device_requests", []):
        args += ["--gpus", f"device={','.join(request['DeviceIDs'])}"]
    for key, value in sorted(spec.get("environment", {}).items()):
        args += ["-e", f"{key}={value}"]
    for key, value in sorted(spec["labels"].items()):
        args += ["--label", f"{key}={value}"]
    return shlex.join(args + [spec["image"], *spec["command"]])
