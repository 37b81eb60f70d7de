"""CLI: `appliance repro`."""

import sys
from pathlib import Path

import click
from rich.console import Console

from appliance.cli.options import REPEATS, OutputPath, lock_option, signing_key_option
from appliance.cli.progress import progress_display
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock
from appliance.host.docker import docker_endpoint, engine_problem
from appliance.host.gpu import visible_gpus
from appliance.workflows.repro import preflight, reproduce


@click.group("repro")
def repro_group() -> None:
    """Reproduce the published findings on a target (what `make repro-<target>` runs)."""


@repro_group.command("preflight")
@click.argument("target")
@click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Directory with the GGUF files the target's profiles need.",
)
@lock_option
def repro_preflight(target: str, models_dir: Path | None, lock_path: Path | None) -> None:
    """Check, before building anything, that this machine can run TARGET's reproduction."""
    profiles = preflight(load_lock(lock_path), target, visible_gpus(), models_dir, engine_problem())
    click.echo(
        f"repro-{target}: this machine can run {', '.join(profiles)} (Docker engine at {docker_endpoint()})"
    )


@repro_group.command("run")
@click.argument("target")
@click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Directory with the GGUF files (GPU targets); the cpu target "
    "synthesizes its tiny model into the cache.",
)
@click.option(
    "--source",
    default="auto",
    show_default=True,
    help="auto (canonical when reachable, else the b10229 stand-in), canonical, "
    "a stand-in name or a llama.cpp directory.",
)
@click.option(
    "--out",
    "out_root",
    type=OutputPath(directory=True),
    default=None,
    help="Directory for the run bundles, one per profile (default: runs/).",
)
@signing_key_option("the bundles", made_on_first_use=True)
@click.option("--repeats", type=REPEATS, default=None, help="Override the profiles' repeats.")
@lock_option
def repro_run(
    target: str,
    models_dir: Path | None,
    source: str,
    out_root: Path | None,
    key: Path | None,
    repeats: int | None,
    lock_path: Path | None,
) -> None:
    """Reproduce TARGET's findings: preflight, engine image, every reproduction profile,
    signed bundles, verification and the verdict against evidence/. Exits 1 unless every
    finding is reproduced."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    with progress_display() as progress:
        reports = reproduce(
            load_lock(lock_path),
            target,
            console,
            models_dir=models_dir,
            source=source,
            out_root=out_root,
            key=key,
            repeats=repeats,
            progress=progress,
        )
    failed = [r for r in reports if not r.reproduced]
    if failed:
        raise ApplianceError(
            f"repro-{target}: {len(failed)} of {len(reports)} profile(s) not "
            "verified as trusted or not reproduced (see the tables above)"
        )


COMMANDS: list[click.Command] = [repro_group]
