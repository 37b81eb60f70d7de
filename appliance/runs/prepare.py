"""Everything decided before the first trial: profile, model, target, GPU, image, host checks.

`prepare_run` does the checks cheapest first and fails fast with one line, before anything
is written: a run directory exists only for a run that can start.
"""

import dataclasses
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors

from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.progress import ProgressFn
from appliance.core.units import format_size
from appliance.engine.lock import Lock
from appliance.host.cgroups import BlockDevice, block_device_for, cgroup_version
from appliance.host.filesystems import refuse_volatile_model
from appliance.host.gpu import Gpu, target_for_capability, visible_gpus
from appliance.host.meminfo import MEMINFO, meminfo_bytes
from appliance.host.read_ahead import SYSFS, ReadAheadError, ReadAheadMode, check_settable, read_ahead_file
from appliance.images.labels import (
    IMAGE_REPOSITORY,
    candidate_images,
    missing_experimental,
    stand_in_of_labels,
)
from appliance.planner.accounting import account_file
from appliance.planner.plan import CUDA, RPC
from appliance.runs import device_server
from appliance.runs.cache_capacity import check_cache_capacity
from appliance.runs.model_files import CheckedModel, check_model, check_routes, locate_model, routes_path
from appliance.runs.placement import AUTO, PLAN, engine_context, planned_args
from appliance.runs.plan import ContainerSettings, Trial
from appliance.runs.profile import STAND_IN_GPU, Profile
from appliance.runs.run_dir import RUN_FILE, RunDir


@dataclass(frozen=True)
class TargetChoice:
    target: str | None  # None: auto could not be resolved on this host (dry run only)
    gpu_ids: tuple[str, ...] | None
    note: str | None


def choose_target(
    profile: Profile, visible: list[Gpu], lock: Lock, dry_run: bool, gpu_index: int | None = None
) -> TargetChoice:
    """The image target and GPU request: `auto` follows the GPU's compute capability."""
    if profile.gpu in ("none", STAND_IN_GPU) or (profile.gpu == "optional" and not visible):
        return TargetChoice("cpu" if profile.target == "auto" else profile.target, None, None)
    if not visible:
        message = (
            f"profile {profile.name} needs an NVIDIA GPU and none is visible here; "
            f"`appliance doctor` shows what is missing"
        )
        if not dry_run:
            raise ApplianceError(message)
        target = None if profile.target == "auto" else profile.target
        return TargetChoice(target, (str(gpu_index or 0),), message)
    gpu = next((g for g in visible if g.index == (gpu_index or 0)), None)
    if gpu is None:
        raise ApplianceError(
            f"no GPU with index {gpu_index}: visible are {', '.join(str(g.index) for g in visible)}"
        )
    fitting = target_for_capability(gpu.compute_capability, lock)
    target = fitting if profile.target == "auto" else profile.target
    if fitting is None or target != fitting:
        raise ApplianceError(
            f"GPU {gpu.index} ({gpu.name}, compute capability "
            f"{gpu.compute_capability}) fits no image target "
            f"{'(sm89 or sm120)' if target is None else target}; "
            "`appliance doctor` lists the GPUs and targets"
        )
    return TargetChoice(target, (str(gpu.index),), None)


def find_image(
    client: docker.DockerClient, candidates: list[tuple[str, str | None]], experimental: tuple[str, ...] = ()
) -> tuple[str, str | None]:
    """The first (tag, stand-in) whose image exists here (images with `experimental` on top)."""
    for tag, stand_in in candidates:
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            continue
        except docker.errors.APIError as exc:
            raise ApplianceError(
                f"image {tag!r}: {exc.explanation or exc}: name a local image as REPOSITORY:TAG "
                "(`docker images` lists them)"
            ) from None
        return tag, stand_in
    target = candidates[0][0].split(":", 1)[1].split("-", 1)[0]
    how = (
        f"`appliance image build --target {target} {' '.join('--experimental ' + n for n in experimental)}`"
        if experimental
        else f"`make image-{target}`"
    )
    raise ApplianceError(
        f"no engine image for target {target} (looked for "
        f"{', '.join(tag for tag, _ in candidates)}): build it with {how}"
    )


def host_memory_bytes() -> int:
    total = meminfo_bytes("MemTotal")
    if total is None:
        raise ApplianceError(f"cannot read MemTotal from {MEMINFO}")
    return total


def check_limit_fits_host(profile: Profile, trials: list[Trial]) -> None:
    """The largest limit a trial runs under must be below this host's RAM, or it cannot bind."""
    total = host_memory_bytes()
    largest = max(trials, key=lambda t: t.memory_limit(profile), default=None)
    device = (profile.limits.vram or 0) if profile.gpu == STAND_IN_GPU else 0  # the stand-in is host memory
    if device and largest is not None and largest.memory_limit(profile) + device > total:
        raise ConfigError(
            f"profile {profile.name}: the stand-in device's limits.vram ({format_size(device, trim=True)}) "
            f"and the largest memory limit ({format_size(largest.memory_limit(profile), trim=True)}) "
            f"exceed this host's {format_size(total, trim=True)} of RAM, which holds both: lower one"
        )
    if largest is None or largest.memory_limit(profile) <= total:
        return
    what = (
        f"limits.memory {format_size(profile.limits.memory, trim=True)}"
        if largest.memory is None
        else f"the sweep limit {largest.point} ({format_size(largest.memory, trim=True)})"
    )
    raise ConfigError(
        f"profile {profile.name}: {what} exceeds this host's "
        f"{format_size(total, trim=True)} of RAM, so the limit would not bind"
    )


def chosen_gpu(gpus: list[Gpu], choice: TargetChoice) -> Gpu | None:
    if choice.gpu_ids is None:
        return None
    return next((g for g in gpus if str(g.index) == choice.gpu_ids[0]), None)


def check_vram_budget(profile: Profile, gpu: Gpu | None) -> None:
    """A GPU with less memory than limits.vram cannot hold the budget: refused in one line."""
    vram = profile.limits.vram
    if vram is None or gpu is None or vram <= gpu.memory_bytes:
        return
    raise ConfigError(
        f"{profile.source_path}: /limits/vram: {format_size(vram, trim=True)} is more than GPU "
        f"{gpu.index} ({gpu.name}) has ({format_size(gpu.memory_bytes, trim=True)}): lower the budget "
        "or use a larger GPU"
    )


def check_read_ahead(
    profile: Profile, device: BlockDevice | None, model_path: Path, dry_run: bool, sysfs: Path = SYSFS
) -> list[str]:
    """limits.read_ahead against the device holding the model. To be set, the device's
    read_ahead_kb must be readable and (in a real run: written back unchanged) writable, else
    the run is refused in one line (a dry run gets it as a warning). To be observed: a warning
    when the device holds another value than the profile names."""
    kb = profile.limits.read_ahead_kb
    if kb is None:
        return []
    found = device.read_ahead_kb if device is not None else None
    if profile.limits.read_ahead_mode == ReadAheadMode.OBSERVE:
        if found == kb:
            return []
        held = "an unknown read-ahead" if found is None else f"{found} KiB"
        return [
            f"limits.read_ahead is {kb} KiB, but read_ahead_mode is observe and the model's device "
            f"holds {held}: the trials run at that and record it"
        ]

    def refuse(problem: str, fix: str) -> list[str]:
        message = (
            f"{profile.source_path}: /limits/read_ahead: cannot set {kb} KiB: {problem}; {fix}, or "
            "set limits.read_ahead_mode: observe to only record the device's read-ahead"
        )
        if dry_run:
            return [message]
        raise ApplianceError(message)

    if device is None:
        dev = os.stat(model_path).st_dev
        key = f"{os.major(dev)}:{os.minor(dev)}"
        problem = f"model {model_path} is on device {key}, which has no {read_ahead_file(key, sysfs)}"
        return refuse(problem, "put the model on a block device")
    if found is None:
        problem = f"cannot read {read_ahead_file(device.key, sysfs)} ({device.node}, holding {model_path})"
        return refuse(problem, "check that device's sysfs entry")
    if not dry_run:
        try:
            check_settable(device.key, sysfs)
        except ReadAheadError as exc:
            return refuse(str(exc), "run as root")
    return []


def placement_warnings(profile: Profile, model_bytes: int, gpu: Gpu | None) -> list[str]:
    """`auto` placement on a GPU whose free memory holds the whole model: llama.cpp will keep it
    in VRAM, so the RAM limit is not exercised."""
    if gpu is None or profile.placement.mode != AUTO or model_bytes > gpu.free_bytes:
        return []
    return [
        f"placement auto: the whole model ({format_size(model_bytes, trim=True)}) fits in GPU "
        f"{gpu.index}'s free {format_size(gpu.free_bytes, trim=True)}, so llama.cpp may hold it in "
        "VRAM and the RAM limit will not be exercised; set limits.vram (placement plan) or "
        "placement: cpu-moe"
    ]


def device_kind(profile: Profile) -> str:
    """The planner's kind of device for this profile's GPU: the stand-in's RPC server, or CUDA."""
    return RPC if profile.gpu == STAND_IN_GPU else CUDA


def place_trials(profile: Profile, trials: list[Trial], model_path: Path) -> list[Trial]:
    """Each trial with the engine arguments its placement gives at its RAM limit."""
    accounting = account_file(model_path) if profile.placement.mode == PLAN else None
    by_limit: dict[int, tuple[str, ...]] = {}
    out = []
    for trial in trials:
        ram = trial.memory_limit(profile)
        if ram not in by_limit:
            by_limit[ram] = planned_args(
                profile.placement,
                accounting,
                ram,
                profile.limits.vram,
                profile.source_path,
                device_kind(profile),
                engine_context(profile.schedule.prompt, profile.schedule.n_predict),
            )
        out.append(dataclasses.replace(trial, placement=by_limit[ram]))
    return out


def default_run_dir(profile: Profile) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("runs") / f"{profile.name}-{stamp}"


@dataclass(frozen=True)
class PreparedRun:
    profile: Profile
    model: CheckedModel
    choice: TargetChoice
    image: str
    image_checked: bool
    settings: ContainerSettings
    trials: list[Trial]
    run_dir: Path
    stand_in: str | None = None  # the stand-in source the image was built from; None: canonical
    gpu: Gpu | None = None  # the GPU the trials get (or the one --assume-gpu names)
    warnings: tuple[str, ...] = ()  # said before the trials and recorded in run.json


@dataclass(frozen=True)
class RunRequest:
    """What a run is prepared for, beside its profile, models directory and lock: its trials
    (`trial_plan` or `sweep_plan`) and the options every run kind shares.

    With resume, `out` must be an existing run directory (its trials so far are kept).
    `located` is `locate_model`'s answer when the caller (a sweep's plan) has it already: the
    model file is located once per run. `assume_gpu` (dry runs only) stands for the host's
    GPUs, so a plan for a GPU that is not here can be printed; `skeleton` (dry runs only)
    accepts a header-only file of another size and digest for the model (`appliance model
    skeleton`), and every line says so."""

    trials: list[Trial]
    out: Path | None = None  # the run directory; None: a new one under runs/
    dry_run: bool = False
    skip_digest: bool = False
    image: str | None = None  # None: the lock's image for the chosen target
    gpu_index: int | None = None
    resume: bool = False
    located: tuple[Path, int] | None = None
    assume_gpu: Gpu | None = None
    skeleton: bool = False


def prepare_run(
    profile: Profile,
    models_dir: Path,
    lock: Lock,
    request: RunRequest,
    client_factory: Any,
    progress: ProgressFn | None = None,
) -> tuple[PreparedRun, Any]:
    """All checks, cheapest first, for the request's trials. Returns the prepared run and a
    Docker client (None in a dry run); `client_factory()` connects (or raises the "Docker
    down" error)."""
    trials, out, dry_run, image = request.trials, request.out, request.dry_run, request.image
    resume, located, assume_gpu, skeleton = (
        request.resume,
        request.located,
        request.assume_gpu,
        request.skeleton,
    )
    if assume_gpu is not None and not dry_run:
        raise ApplianceError("--assume-gpu is for dry runs only: a real run uses the GPUs it sees")
    if skeleton and not dry_run:
        raise ApplianceError("--skeleton is for dry runs only: a real run needs the model file itself")
    run_dir = out if out is not None else default_run_dir(profile)
    if resume:
        if out is None or not RunDir(run_dir).run_file.is_file():
            raise ApplianceError(
                f"--resume needs --out naming the run directory to resume (one with a {RUN_FILE})"
            )
    elif run_dir.exists() and any(run_dir.iterdir()):
        raise ApplianceError(
            f"{run_dir} already exists and is not empty: choose another --out (or --resume it)"
        )
    if located is None:
        located = locate_model(profile.model, models_dir, skeleton)
    if not skeleton:
        refuse_volatile_model(located[0])
    if run_dir.resolve().is_relative_to(models_dir.resolve()):
        raise ApplianceError(
            f"--out {run_dir} is inside the models directory, which is never written to: choose another --out"
        )
    device = block_device_for(located[0])
    read_ahead_warnings = check_read_ahead(profile, device, located[0], dry_run)
    gpus = [assume_gpu] if assume_gpu is not None else visible_gpus()
    choice = choose_target(profile, gpus, lock, dry_run, request.gpu_index)
    gpu = chosen_gpu(gpus, choice)
    check_vram_budget(profile, gpu)
    client = None
    if not dry_run:
        check_limit_fits_host(profile, trials)
        client = client_factory()
    stand_in = None
    if image is None and choice.target is not None:
        candidates = candidate_images(lock, choice.target, profile.experimental)
        image, stand_in = candidates[0] if dry_run else find_image(client, candidates, profile.experimental)
    elif image is None:
        image = f"{IMAGE_REPOSITORY}:<sm89|sm120>-{lock.digest[:12]}"
    elif client is not None:
        find_image(client, [(image, None)])
        labels = client.images.get(image).labels or {}
        missing = missing_experimental(labels, profile.experimental)
        if missing:
            raise ApplianceError(
                f"image {image} does not carry {', '.join(missing)}, which profile "
                f"{profile.name} needs: build one with `appliance image build --target "
                f"{choice.target} {' '.join('--experimental ' + name for name in missing)}`"
            )
        stand_in = stand_in_of_labels(labels)
    if client is not None and profile.gpu == STAND_IN_GPU:
        device_server.check_image(image, client.images.get(image).labels or {})
    model = check_model(
        profile.model,
        models_dir,
        skip_digest=request.skip_digest,
        progress=progress,
        located=located,
        skeleton=skeleton,
    )
    settings = ContainerSettings(
        models_dir=models_dir,
        block_device=device,
        cgroup_version=cgroup_version(),
        gpu_device_ids=choice.gpu_ids,
    )
    if profile.routes is not None:
        check_routes(profile.routes, models_dir)
    for variant in profile.variants:
        if variant.routes is not None:
            routes_path(variant.routes, models_dir, variant.name)
    placed = place_trials(profile, list(trials), model.path)
    check_cache_capacity(profile, placed, model.path, profile.model.bytes or model.bytes)
    prepared = PreparedRun(
        profile,
        model,
        choice,
        image,
        not dry_run,
        settings,
        placed,
        run_dir,
        stand_in,
        gpu=gpu,
        warnings=(
            *placement_warnings(profile, profile.model.bytes or model.bytes, gpu),
            *read_ahead_warnings,
        ),
    )
    return prepared, client
