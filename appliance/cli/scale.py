"""CLI: `appliance scale` (what `make scale` runs)."""

import sys
from pathlib import Path

import click
from rich.console import Console

from appliance.cli.options import lock_option
from appliance.cli.progress import progress_display
from appliance.engine.lock import load_lock
from appliance.workflows.scale import scale


@click.command("scale")
@click.option(
    "--source",
    default="auto",
    show_default=True,
    help="auto (canonical when reachable, else the b10229 stand-in, said loudly), "
    "canonical, a stand-in name or a llama.cpp directory.",
)
@click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where the full-shape models are synthesized (default: the cache's models/scale).",
)
@click.option("--dry-run", is_flag=True, help="Print the plan (time, disk, trials) and stop.")
@lock_option
def scale_command(source: str, models_dir: Path | None, dry_run: bool, lock_path: Path | None) -> None:
    """The experiment at its own scale on the cpu image: the Qwen3.5-35B-A3B-shape and
    Qwen3-30B-A3B-shape synthetics (about 18 GB each, made when missing) swept around 8 GiB,
    verified, reported and compared with the findings; says first how long and how much disk."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    with progress_display() as progress:
        scale(
            load_lock(lock_path),
            console,
            models_dir=models_dir,
            source=source,
            dry_run=dry_run,
            progress=progress,
        )


COMMANDS: list[click.Command] = [scale_command]
