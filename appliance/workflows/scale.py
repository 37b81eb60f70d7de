"""`make scale`: the experiment at its own scale on this machine's CPU (not in CI).

Each profile of SCALE_PROFILES is swept as `make demo` sweeps its miniature (demo.demo: the
cpu image, the model synthesized when missing, one disk probe, the trials, one verified bundle,
its report, the comparison with the findings it names), with SCALE_REPEATS interleaved
repeats. Before anything starts the plan says how long it expects to take and how much disk the
missing models need, and refuses a models directory on tmpfs or without that space.
"""

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from appliance.core.paths import cache_dir
from appliance.core.progress import ProgressFn
from appliance.core.units import format_size
from appliance.engine.lock import Lock
from appliance.host.filesystems import refuse_unfit_target
from appliance.runs.profile import load_profile
from appliance.workflows.demo import demo
from appliance.workflows.run import PipelineReport

SCALE_PROFILES = ("qwen35-shape-8g", "qwen3-30b-shape")
SCALE_REPEATS = 3
# Measured on this 2-core machine under a load of 4 to 6: `model synth --like` wrote the
# 17.9 GB Qwen3.5 shape in 134 s and the 18.6 GB Qwen3-30B shape in 117 s.
SYNTH_BPS = 130e6
HASH_BPS = 400e6  # the first sha256 of a new file (assumed; cached afterwards)
# One trial's mean wall time at 8 GiB, 64 decode tokens, per profile. qwen35-shape-8g: `appliance
# sweep qwen35-shape-8g --memory 8GiB --repeats 1` on this 2-core machine under a load of 6 to
# 10 (baseline 1,351 s, demand mmap 1,013 s, demand prefetch 562 s; idle: unmeasured), on the
# synthetic router's routing, before its routes were forced and its cache variants added.
# qwen3-30b-shape: its 3-repeat sweep on the idle machine, 24 trials in 59 min (docs/sweeps.md).
EXPECTED_TRIAL_S = {"qwen35-shape-8g": 975.0, "qwen3-30b-shape": 148.0}


@dataclass(frozen=True)
class ScaleStep:
    profile: str
    model: Path
    model_bytes: int
    missing: bool
    trials: int  # the sweep's trials, the disk probe not counted

    def expected_s(self) -> float:
        made = self.model_bytes / SYNTH_BPS + self.model_bytes / HASH_BPS if self.missing else 0.0
        return made + self.trials * EXPECTED_TRIAL_S[self.profile]


def default_models_dir() -> Path:
    return cache_dir() / "models" / "scale"


def scale_plan(models_dir: Path) -> list[ScaleStep]:
    steps = []
    for name in SCALE_PROFILES:
        profile = load_profile(name)
        assert profile.model.bytes is not None and profile.sweep is not None  # pinned, swept
        path = models_dir / profile.model.file
        trials = len(profile.sweep.memory) * len(profile.variants) * SCALE_REPEATS
        steps.append(ScaleStep(name, path, profile.model.bytes, not path.exists(), trials))
    return steps


def disk_needed(steps: list[ScaleStep]) -> int:
    return sum(step.model_bytes for step in steps if step.missing)


def print_scale_plan(steps: list[ScaleStep], console: Console) -> None:
    for step in steps:
        state = f"to synthesize ({format_size(step.model_bytes)})" if step.missing else "present"
        console.print(
            f"{step.profile}: model {step.model} {state}; {step.trials} trials "
            f"({SCALE_REPEATS} interleaved repeats); about {step.expected_s() / 60:.0f} min",
            soft_wrap=True,
        )
    total = sum(step.expected_s() for step in steps)
    console.print(
        f"make scale expects about {total / 60:.0f} min (trials priced as measured on this 2-core "
        f"machine, docs/sweeps.md) and needs "
        f"{format_size(disk_needed(steps))} ({disk_needed(steps)} bytes) of disk for the missing "
        f"models; the trials' own timeouts are derived from the model and the disk probe"
    )


def scale(
    lock: Lock,
    console: Console,
    *,
    models_dir: Path | None = None,
    source: str = "auto",
    dry_run: bool = False,
    progress: ProgressFn | None = None,
) -> list[PipelineReport]:
    """Print the plan; unless dry_run, sweep each profile of SCALE_PROFILES to a verified bundle."""
    models_dir = models_dir or default_models_dir()
    steps = scale_plan(models_dir)
    print_scale_plan(steps, console)
    need = disk_needed(steps)
    if need:
        refuse_unfit_target(models_dir / "model.gguf", need, "the missing models")
    if dry_run:
        return []
    return [
        demo(
            lock,
            console,
            source=source,
            models_dir=models_dir,
            repeats=SCALE_REPEATS,
            progress=progress,
            profile_name=step.profile,
        )
        for step in steps
    ]
