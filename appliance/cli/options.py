"""Options shared by several verb groups."""

from pathlib import Path

import click

lock_option = click.option(
    "--lock",
    "lock_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Engine lock file (default: $APPLIANCE_LOCK, else engine/llama.cpp.lock.json in "
         "the checkout).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
