"""CLI: `appliance run PROFILE --models DIR`: parse, then delegate to `appliance.runs.prepare`
(the trial plan and its checks; a dry run stops there) and `appliance.workflows.run` (the
trials, the statistics and the sealed bundle)."""

import secrets

import click

from appliance.cli.options import TrialArgs, strict_json, trial_options
from appliance.cli.progress import progress_display
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock
from appliance.host.docker import docker_client
from appliance.runs.plan import LlamaMoeTraceEngine, trial_plan
from appliance.runs.prepare import RunRequest, prepare_run
from appliance.runs.preview import planned_specs, print_header, print_plan
from appliance.runs.status import RunStatus
from appliance.workflows.run import execute_profile


@click.command("run")
@click.argument("profile_name", metavar="PROFILE")
@trial_options("run")
def run_command(profile_name: str, trial: TrialArgs) -> None:
    """Run an experiment PROFILE (a built-in name or a YAML file) in the engine image.

    With --dry-run --json the trial plan is printed as JSON."""
    console = trial.console()
    profile = trial.profile(profile_name)
    lock = load_lock(trial.lock_path)
    if trial.dry_run:
        with progress_display(quiet=trial.as_json) as progress:
            request = RunRequest(
                trial_plan(profile, trial.repeats),
                out=trial.out,
                dry_run=True,
                skip_digest=trial.skip_digest_check,
                image=trial.image,
                gpu_index=trial.gpu_index,
                assume_gpu=trial.assume_gpu,
                skeleton=trial.skeleton,
            )
            prepared, _ = prepare_run(profile, trial.models_dir, lock, request, docker_client, progress)
        specs = planned_specs(prepared, LlamaMoeTraceEngine(prepared.image), secrets.token_hex(6))
        if trial.as_json:
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
    outcome = execute_profile(
        profile,
        trial.models_dir,
        lock,
        console,
        image=trial.image,
        out=trial.out,
        repeats=trial.repeats,
        options=trial.run_options(),
        skip_digest=trial.skip_digest_check,
        gpu_index=trial.gpu_index,
    )
    if outcome.status != RunStatus.COMPLETE:
        raise ApplianceError(
            f"run interrupted: {outcome.run_dir} holds the trials recorded so far and is marked incomplete",
            exit_code=130,
        )


COMMANDS: list[click.Command] = [run_command]
