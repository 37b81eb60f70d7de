"""CLI: `appliance patches`."""

import click


@click.group("patches")
def patches_group() -> None:
    """Manage the llama.cpp patch series (list, apply, bracket check)."""


COMMANDS: list[click.Command] = [patches_group]
