"""CLI: `appliance plan`. Not built yet: see the issue tracker."""

import click

from appliance.errors import ApplianceError


@click.command("plan")
def plan_command() -> None:
    """Plan placement and memory for a GGUF under RAM/VRAM limits. (not built yet)"""
    raise ApplianceError("'appliance plan' is not built yet")


COMMANDS: list[click.Command] = [plan_command]
