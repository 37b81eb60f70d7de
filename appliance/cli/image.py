"""CLI: `appliance image`."""

import click


@click.group("image")
def image_group() -> None:
    """Build, inspect, publish and pull engine images."""


COMMANDS: list[click.Command] = [image_group]
