"""CLI: `appliance trace`."""

import click


@click.group("trace")
def trace_group() -> None:
    """Inspect and replay MoE route traces through expert-cache policies."""


COMMANDS: list[click.Command] = [trace_group]
