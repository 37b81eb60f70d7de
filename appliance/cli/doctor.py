"""CLI: `appliance doctor`."""

from pathlib import Path

import click

from appliance.cli.options import json_option, lock_option, strict_json
from appliance.core.checks import check_lines
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock
from appliance.host.doctor import diagnose


@click.command("doctor")
@lock_option
@json_option
def doctor_command(lock_path: Path | None, as_json: bool) -> None:
    """Check this machine: Docker engine and cgroups, a BuildKit client, the NVIDIA runtime,
    GPUs and driver (NVML), the engine target that fits, swap, fincore.

    One line per check: PASS / WARN / FAIL, with the fix. Exits 1 when a check fails.
    """
    report = diagnose(load_lock(lock_path))
    if as_json:
        click.echo(strict_json(report.to_json(), indent=2))
    else:
        for line in check_lines(report.checks):
            click.echo(line)
    if not report.ok:
        failing = [check.name for check in report.checks if not check.ok]
        raise ApplianceError(f"doctor: {', '.join(failing)} failed: apply the fix shown")


COMMANDS: list[click.Command] = [doctor_command]
