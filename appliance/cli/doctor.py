"""CLI: `appliance doctor`."""

import click


@click.command("doctor")
def doctor_command() -> None:
    """Check this machine: Docker, BuildKit, NVIDIA runtime, GPUs, swap, fincore."""


COMMANDS: list[click.Command] = [doctor_command]
