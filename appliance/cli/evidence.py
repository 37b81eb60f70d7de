"""CLI: `appliance evidence`."""

import click


@click.group("evidence")
def evidence_group() -> None:
    """Published results and comparison of new runs against them."""


COMMANDS: list[click.Command] = [evidence_group]
