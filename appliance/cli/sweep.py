"""CLI: `appliance sweep PROFILE --memory LIST --models DIR`: parse, then delegate."""

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from appliance.cli.options import (
    assume_gpu_option,
    finite,
    refuse_dry_run_only,
    refuse_key_with_unsigned,
    run_options,
    skeleton_option,
    strict_json,
    trial_options,
)
from appliance.cli.progress import progress_display


@click.command("sweep")
@click.argument("profile_name", metavar="PROFILE")
@click.option(
    "--memory",
    default=None,
    metavar="LIST",
    help="Comma-separated limits: sizes with a unit (150MiB,6GiB) or fractions of the "
    "model file (0.3,0.5,1.2). Default: the profile's sweep.memory.",
)
@click.option(
    "--max-hours",
    type=finite(min=0, min_open=True),
    default=6.0,
    show_default=True,
    help="Refuse a sweep whose predicted time is longer.",
)
@click.option("--dry-run", is_flag=True, help="Print the grid and the predicted time only.")
@trial_options("sweep")
@assume_gpu_option
@skeleton_option
def sweep_command(
    profile_name: str,
    models_dir: Path,
    memory: str | None,
    out: Path | None,
    repeats: int | None,
    max_hours: float,
    dry_run: bool,
    skip_digest_check: bool,
    image: str | None,
    gpu_index: int | None,
    trial_timeout: float | None,
    as_json: bool,
    key: Path | None,
    unsigned: bool,
    cluster_address: str | None,
    max_attempts: int,
    resume: bool,
    lock_path: Path | None,
    assume_gpu: Any,
    skeleton: bool,
) -> None:
    """Run PROFILE's variants at several memory limits (interleaved, cold cache each trial),
    measure the disk once, and set each trial's reads beside LRU and Belady replays of its own
    route trace. One run directory, one bundle."""
    from appliance.core.errors import ApplianceError
    from appliance.engine.lock import load_lock
    from appliance.runs.profile import load_profile
    from appliance.runs.report import print_header
    from appliance.runs.status import RunStatus
    from appliance.runs.sweep import plan_sweep, print_grid
    from appliance.workflows.sweep import execute_sweep

    refuse_key_with_unsigned(key, unsigned)
    refuse_dry_run_only(dry_run, assume_gpu, skeleton)
    console = Console(stderr=as_json, width=None if sys.stdout.isatty() else 160)
    profile = load_profile(profile_name)
    lock = load_lock(lock_path)
    with progress_display(quiet=as_json) as progress:
        plan, client = plan_sweep(
            profile,
            models_dir,
            lock,
            memory=memory,
            repeats=repeats,
            out=out,
            dry_run=dry_run,
            max_hours=max_hours,
            skip_digest=skip_digest_check,
            image=image,
            gpu_index=gpu_index,
            progress=progress,
            assume_gpu=assume_gpu,
            skeleton=skeleton,
            resume=resume,
        )
    if dry_run:
        console.print("[bold]dry run[/bold]: nothing is started")
        print_header(console, plan.prepared)
        print_grid(console, plan)
        if as_json:
            click.echo(
                strict_json(
                    {
                        "profile": plan.profile.name,
                        "limits": [limit.bytes for limit in plan.limits],
                        "trials": [t.name for t in plan.prepared.trials],
                        "placement": {t.name: list(t.placement) for t in plan.prepared.trials},
                        "predicted_seconds": round(plan.estimate_s, 1),
                    },
                    indent=2,
                )
            )
        return
    options = run_options(key, unsigned, trial_timeout, cluster_address, max_attempts, resume)
    outcome, sweep = execute_sweep(
        plan,
        client,
        lock,
        console,
        options,
    )
    if as_json:
        click.echo(
            strict_json(
                {
                    "run_dir": str(outcome.run_dir),
                    "status": outcome.status,
                    "summary": sweep.get("summary"),
                    "probe": sweep.get("probe"),
                },
                indent=2,
            )
        )
    if outcome.status != RunStatus.COMPLETE:
        raise ApplianceError(
            f"sweep interrupted: {outcome.run_dir} holds the trials recorded so far and is marked incomplete",
            exit_code=130,
        )


COMMANDS: list[click.Command] = [sweep_command]
