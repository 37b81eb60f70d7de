"""Reproduction targets: what `make repro-<target>` runs, and what it needs before building.

The preflight runs before any image build so that a machine that cannot run a target's
schedule (no GPU of the target's compute capability, a driver older than the lock's minimum,
no model directory) stops at once with what is needed.
"""

from pathlib import Path

from rich.console import Console

from appliance.analysis.run_analyses import read_paging_analysis
from appliance.core.errors import ApplianceError
from appliance.core.paths import cache_dir
from appliance.core.progress import ProgressFn
from appliance.engine.lock import Lock, Target
from appliance.host.docker import engine_fix, engine_problem
from appliance.host.gpu import Gpu, driver_satisfies, target_for_capability, visible_gpus
from appliance.runs.profile import load_profile
from appliance.workflows.run import (
    PipelineReport,
    RunOptions,
    ensure_synth_model,
    execute_profile,
    obtain_engine_image,
    print_report,
    signing_key,
    verify_and_compare,
)

REPRO_PROFILES: dict[str, tuple[str, ...]] = {
    "cpu": ("tiny-oversub",),
    "sm89": ("qwen35-8g", "qwen3-30b-16"),
    "sm120": ("qwen35-8g", "qwen3-30b-16"),
}


def gpu_problem(lock: Lock, target: Target, gpus: list[Gpu]) -> str | None:
    """Why these GPUs cannot run target, or None when they can (or it needs none)."""
    cuda = target.cuda
    if cuda is None:
        return None
    wanted = cuda.compute_capability
    if not gpus:
        return (
            f"target {target.name} needs an NVIDIA GPU of compute capability {wanted} and "
            "NVML finds no GPU here (driver missing or no device): run on such a machine; "
            "`appliance doctor` shows what this one has"
        )
    matching = [g for g in gpus if g.compute_capability == wanted]
    if not matching:
        found = ", ".join(f"{g.name} (compute capability {g.compute_capability})" for g in gpus)
        fits = sorted(
            {
                name
                for g in gpus
                if (name := target_for_capability(g.compute_capability, lock)) in REPRO_PROFILES
            }
        )
        hint = f"; this machine fits repro-{fits[0]}" if fits else ""
        return f"target {target.name} needs compute capability {wanted}, found {found}{hint}"
    driver = matching[0].driver
    if not driver_satisfies(driver, cuda.min_driver):
        return (
            f"target {target.name} needs NVIDIA driver {cuda.min_driver} or newer for "
            f"CUDA {cuda.version}, found {driver or 'unknown'}: update the driver"
        )
    return None


def preflight(
    lock: Lock, target_name: str, gpus: list[Gpu], models_dir: Path | None, docker_problem: str | None
) -> list[str]:
    """The profiles target_name reproduces, after checking this machine can run them.
    `docker_problem`: why the Docker engine is unreachable (`host.docker.engine_problem`)."""
    if target_name not in REPRO_PROFILES:
        raise ApplianceError(
            f"no reproduction for target {target_name!r}: choose one of {', '.join(REPRO_PROFILES)}"
        )
    target = lock.target(target_name)
    problem = gpu_problem(lock, target, gpus)
    if problem is not None:  # before Docker: no command on this machine fixes the hardware
        raise ApplianceError(f"repro-{target_name}: {problem}")
    if docker_problem is not None:
        raise ApplianceError(
            f"repro-{target_name}: {docker_problem}; every reproduction runs in Docker: {engine_fix()}"
        )
    if target.cuda is not None:
        if models_dir is None:
            raise ApplianceError(
                f"repro-{target_name} runs "
                f"{' and '.join(REPRO_PROFILES[target_name])} on real models: "
                "pass MODELS=DIR (the directory holding their GGUF files)"
            )
        if not models_dir.is_dir():
            raise ApplianceError(f"MODELS={models_dir} is not a directory")
    return list(REPRO_PROFILES[target_name])


def reproduce(
    lock: Lock,
    target: str,
    console: Console,
    *,
    models_dir: Path | None,
    source: str = "auto",
    out_root: Path | None = None,
    key: Path | None = None,
    repeats: int | None = None,
    progress: ProgressFn | None = None,
) -> list[PipelineReport]:
    """`make repro-<target>`: preflight, image, every reproduction profile, sign, verify, compare."""
    profiles = preflight(lock, target, visible_gpus(), models_dir, engine_problem())
    key = signing_key(key, False, console)
    tag = obtain_engine_image(lock, target, source, console, progress)
    reports = []
    for name in profiles:
        profile = load_profile(name)
        directory = models_dir or cache_dir() / "models" / "demo"
        ensure_synth_model(profile, directory, console, progress)
        out = out_root / name if out_root is not None else None
        outcome = execute_profile(
            profile,
            directory,
            lock,
            console,
            image=tag,
            out=out,
            repeats=repeats,
            options=RunOptions(key=key),
            progress=progress,
        )
        report = verify_and_compare(outcome, profile, key, console)
        report.paging = read_paging_analysis(outcome.run_dir)
        print_report(report, console)
        reports.append(report)
    return reports
