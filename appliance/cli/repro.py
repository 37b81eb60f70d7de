"""CLI: `appliance repro`."""

from pathlib import Path

import click

from appliance.cli.options import lock_option
from appliance.lock import load_lock
from appliance.provenance import gpu_facts
from appliance.repro import preflight


@click.group("repro")
def repro_group() -> None:
    """Reproduce the published findings on a target (what `make repro-<target>` runs)."""


@repro_group.command("preflight")
@click.argument("target")
@click.option("--models", "models_dir", type=click.Path(path_type=Path), default=None,
              help="Directory with the GGUF files the target's profiles need.")
@lock_option
def repro_preflight(target: str, models_dir: Path | None, lock_path: Path | None) -> None:
    """Check, before building anything, that this machine can run TARGET's reproduction."""
    profiles = preflight(load_lock(lock_path), target, gpu_facts(), models_dir)
    click.echo(f"repro-{target}: this machine can run {', '.join(profiles)}")


COMMANDS: list[click.Command] = [repro_group]
