"""CLI: `appliance doctor`."""

import json
from pathlib import Path

import click
from rich.console import Console

from appliance.cli.options import json_option, lock_option
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock
from appliance.host.doctor import FAIL, PASS, diagnose

STYLE = {PASS: "green", "warn": "yellow", FAIL: "red"}


@click.command("doctor")
@lock_option
@json_option
def doctor_command(lock_path: Path | None, as_json: bool) -> None:
    """Check this machine: Docker engine and cgroups, a BuildKit client, the NVIDIA runtime,
    GPUs and driver (NVML), the engine target that fits, swap, fincore.

    One line per check: pass / warn / fail, with the fix. Exits 1 when a check fails.
    """
    report = diagnose(load_lock(lock_path))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        console = Console(soft_wrap=True)
        for check in report.checks:
            fix = f"  [dim]fix: {check.fix}[/]" if check.fix else ""
            console.print(f"[{STYLE[check.status]}]{check.status:4}[/] {check.name:26} {check.detail}{fix}")
    if not report.ok:
        failed = [check.name for check in report.checks if check.status == FAIL]
        raise ApplianceError(f"this machine fails {len(failed)} check(s): {', '.join(failed)}")


COMMANDS: list[click.Command] = [doctor_command]
