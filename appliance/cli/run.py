"""CLI: `appliance run`. Not built yet: see the issue tracker."""

import click

from appliance.errors import ApplianceError


@click.command("run")
def run_command() -> None:
    """Run an experiment profile in the engine image. (not built yet)"""
    raise ApplianceError("'appliance run' is not built yet")


COMMANDS: list[click.Command] = [run_command]
