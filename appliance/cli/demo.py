"""CLI: `appliance demo` (what `make demo` runs)."""

import sys
from pathlib import Path

import click
from rich.console import Console

from appliance.cli.options import REPEATS, OutputPath, lock_option
from appliance.cli.progress import progress_display
from appliance.engine.lock import load_lock
from appliance.workflows.pipeline import demo


@click.command("demo")
@click.option("--source", default="auto", show_default=True,
              help="auto (canonical when reachable, else the b10229 stand-in, said loudly), "
              "canonical, a stand-in name or a llama.cpp directory.")
@click.option("--out", type=OutputPath(directory=True), default=None,
              help="Run directory (default: runs/tiny-oversub-<UTC time>).")
@click.option("--models", "models_dir", type=click.Path(path_type=Path, file_okay=False),
              default=None, help="Where the tiny model is synthesized (default: the cache).")
@click.option("--repeats", type=REPEATS, default=None, help="Override the profile's 3 repeats.")
@lock_option
def demo_command(source: str, out: Path | None, models_dir: Path | None, repeats: int | None,
                 lock_path: Path | None) -> None:
    """The whole pipeline at miniature scale: a tiny synthetic MoE model about twice the
    memory limit, run on the cpu image (profile tiny-oversub: baseline, demand mmap, demand
    mmap with route-aware prefetch), sealed as a bundle, verified, its disk reads compared
    with an LRU replay of its own route trace, and compared with evidence/."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    with progress_display() as progress:
        demo(load_lock(lock_path), console, source=source, out=out, models_dir=models_dir,
             repeats=repeats, progress=progress)


COMMANDS: list[click.Command] = [demo_command]
