"""CLI: `appliance model`."""

import click


@click.group("model")
def model_group() -> None:
    """Synthesize tiny MoE GGUF models and inspect GGUF files."""


COMMANDS: list[click.Command] = [model_group]
