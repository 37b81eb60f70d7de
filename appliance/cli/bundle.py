"""CLI: `appliance bundle`."""

import click


@click.group("bundle")
def bundle_group() -> None:
    """Sign and verify run bundles."""


COMMANDS: list[click.Command] = [bundle_group]
