"""CLI: `appliance run PROFILE --models DIR`: parse, then delegate to `appliance.runs.prepare`
(the trial plan and its checks; a dry run stops there) and `appliance.workflows.run` (the
trials, the statistics and the sealed bundle)."""

import secrets
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from appliance.cli.options import (
    assume_gpu_option,
    refuse_dry_run_only,
    refuse_key_with_unsigned,
    run_options,
    skeleton_option,
    strict_json,
    trial_options,
)
from appliance.cli.progress import progress_display
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock
from appliance.host.docker import docker_client
from appliance.runs.plan import LlamaMoeTraceEngine, trial_plan
from appliance.runs.prepare import prepare_run
from appliance.runs.profile import load_profile
from appliance.runs.report import planned_specs, print_header, print_plan
from appliance.runs.status import RunStatus
from appliance.workflows.run import execute_profile


@click.command("run")
@click.argument("profile_name", metavar="PROFILE")
@click.option("--dry-run", is_flag=True, help="Print the trial plan and docker parameters only.")
@trial_options("run")
@assume_gpu_option
@skeleton_option
def run_command(
    profile_name: str,
    models_dir: Path,
    out: Path | None,
    repeats: int | None,
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
    """Run an experiment PROFILE (a built-in name or a YAML file) in the engine image.

    With --dry-run --json the trial plan is printed as JSON."""
    refuse_key_with_unsigned(key, unsigned)
    refuse_dry_run_only(dry_run, assume_gpu, skeleton)
    console = Console(stderr=as_json, width=None if sys.stdout.isatty() else 160)
    profile = load_profile(profile_name)
    lock = load_lock(lock_path)
    if dry_run:
        with progress_display(quiet=as_json) as progress:
            prepared, _ = prepare_run(
                profile,
                models_dir,
                lock,
                trials=trial_plan(profile, repeats),
                out=out,
                dry_run=True,
                skip_digest=skip_digest_check,
                image=image,
                gpu_index=gpu_index,
                client_factory=docker_client,
                progress=progress,
                assume_gpu=assume_gpu,
                skeleton=skeleton,
            )
        specs = planned_specs(prepared, LlamaMoeTraceEngine(prepared.image), secrets.token_hex(6))
        if as_json:
            click.echo(
                strict_json(
                    {
                        "profile": profile.name,
                        "target": prepared.choice.target,
                        "model_digest": prepared.model.digest_status,
                        "note": prepared.choice.note,
                        "containers": specs,
                    },
                    indent=2,
                    sort_keys=True,
                )
            )
            return
        console.print("[bold]dry run[/bold]: nothing is started")
        print_header(console, prepared)
        print_plan(console, prepared, specs)
        return
    options = run_options(key, unsigned, trial_timeout, cluster_address, max_attempts, resume)
    outcome = execute_profile(
        profile,
        models_dir,
        lock,
        console,
        image=image,
        out=out,
        repeats=repeats,
        options=options,
        skip_digest=skip_digest_check,
        gpu_index=gpu_index,
    )
    if outcome.status != RunStatus.COMPLETE:
        raise ApplianceError(
            f"run interrupted: {outcome.run_dir} holds the trials recorded so far and is marked incomplete",
            exit_code=130,
        )


COMMANDS: list[click.Command] = [run_command]
