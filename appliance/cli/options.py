"""Options shared by several verb groups."""

from pathlib import Path

import click

from appliance.core.errors import ConfigError

lock_option = click.option(
    "--lock",
    "lock_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Engine lock file (default: engine/llama.cpp.lock.json in the checkout).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


def refuse_key_with_unsigned(key: Path | None, unsigned: bool) -> None:
    """`--key` and `--unsigned` together are refused the same way by every verb that signs."""
    if unsigned and key is not None:
        raise ConfigError("--key and --unsigned contradict each other: choose one")
