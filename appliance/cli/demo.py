"""CLI: `appliance demo` (what `make demo` runs)."""

import sys
from pathlib import Path

import click
from rich.console import Console

from appliance.cli.options import REPEATS, OutputPath, lock_option
from appliance.cli.progress import progress_display
from appliance.engine.lock import load_lock
from appliance.workflows.demo import DEMO_PROFILES, demo


@click.command("demo")
@click.option(
    "--source",
    default="auto",
    show_default=True,
    help="auto (canonical when reachable, else the b10229 stand-in, said loudly), "
    "canonical, a stand-in name or a llama.cpp directory.",
)
@click.option(
    "--out",
    type=OutputPath(directory=True),
    default=None,
    help="Run directory (default: runs/<profile>-<UTC time>).",
)
@click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where the profile's model is synthesized (default: the cache).",
)
@click.option("--repeats", type=REPEATS, default=None, help="Repeats of the sweep (default 1).")
@click.option(
    "--profile",
    "profile_name",
    type=click.Choice(DEMO_PROFILES),
    default=DEMO_PROFILES[0],
    show_default=True,
    help="tiny-oversub-cache (what `make demo-cache` runs): the engine's expert cache "
    "(experimental patch 0004, built into the image) beside demand mmap and prefetch; "
    "tiny-oversub-prefill (`make demo-prefill`): a 534-token prompt, the prefill readers "
    "(patch 0006) beside demand mmap and prefetch, at a quarter and 1.2 times the model file; "
    "tiny-stand-in (`make demo-gpu`): planned placement on the stand-in GPU (llama.cpp's RPC "
    "device); qwen35-shape-slice-stand-in (`make demo-gpu-slice`): a 2.8 GB slice of the "
    "Qwen3.5-35B-A3B shape on the stand-in GPU, routing forced, with the expert cache.",
)
@lock_option
def demo_command(
    source: str,
    out: Path | None,
    models_dir: Path | None,
    repeats: int | None,
    profile_name: str,
    lock_path: Path | None,
) -> None:
    """The whole pipeline at miniature scale: a tiny synthetic MoE model swept on the cpu
    image over the memory limits of profile tiny-oversub (a quarter, half and 1.2 times the
    model file; baseline, demand mmap, demand mmap with route-aware prefetch), one disk probe,
    one bundle, verified, every trial's decode reads set beside LRU and Belady replays of its
    own route trace, and compared with evidence/."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    with progress_display() as progress:
        demo(
            load_lock(lock_path),
            console,
            source=source,
            out=out,
            models_dir=models_dir,
            repeats=repeats,
            progress=progress,
            profile_name=profile_name,
        )


COMMANDS: list[click.Command] = [demo_command]
