"""CLI: `appliance sweep PROFILE --memory LIST --models DIR`: parse, then delegate."""

import click

from appliance.cli.options import TrialArgs, finite, strict_json, trial_options
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
@trial_options("sweep")
def sweep_command(profile_name: str, memory: str | None, max_hours: float, trial: TrialArgs) -> None:
    """Run PROFILE's variants at several memory limits (interleaved, cold cache each trial),
    measure the disk once, and set each trial's reads beside LRU and Belady replays of its own
    route trace. One run directory, one bundle."""
    from appliance.core.errors import ApplianceError
    from appliance.engine.lock import load_lock
    from appliance.runs.preview import print_header
    from appliance.runs.status import RunStatus
    from appliance.runs.sweep import plan_sweep, print_grid
    from appliance.workflows.sweep import execute_sweep

    console = trial.console()
    profile = trial.profile(profile_name)
    lock = load_lock(trial.lock_path)
    with progress_display(quiet=trial.as_json) as progress:
        plan, client = plan_sweep(
            profile,
            trial.models_dir,
            lock,
            memory=memory,
            repeats=trial.repeats,
            out=trial.out,
            dry_run=trial.dry_run,
            max_hours=max_hours,
            skip_digest=trial.skip_digest_check,
            image=trial.image,
            gpu_index=trial.gpu_index,
            progress=progress,
            assume_gpu=trial.assume_gpu,
            skeleton=trial.skeleton,
            resume=trial.resume,
        )
    if trial.dry_run:
        console.print("[bold]dry run[/bold]: nothing is started")
        print_header(console, plan.prepared)
        print_grid(console, plan)
        if trial.as_json:
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
    outcome, sweep = execute_sweep(
        plan,
        client,
        lock,
        console,
        trial.run_options(),
    )
    if trial.as_json:
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
