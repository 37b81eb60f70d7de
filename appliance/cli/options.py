"""Options and argument types shared by several verb groups: every number a user types is
checked here, at the edge, against the range the code behind it can handle."""

import math
import os
from pathlib import Path
from typing import Any

import click

from appliance.core import atomic
from appliance.core.errors import ConfigError
from appliance.core.limits import MAX_REPEATS, MAX_SEED

MAX_COUNT = 1 << 31  # tokens, steps, batch sizes


class FiniteFloat(click.FloatRange):
    """A float in a range that is also finite: click's FloatRange lets nan and inf through."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def finite(min: float | None = None, max: float | None = None,  # noqa: A002 - click's names
           min_open: bool = False) -> FiniteFloat:
    return FiniteFloat(min=min, max=max, min_open=min_open)


POSITIVE = click.IntRange(min=1, max=MAX_COUNT)
NON_NEGATIVE = click.IntRange(min=0, max=MAX_COUNT)
SEED = click.IntRange(min=0, max=MAX_SEED)
REPEATS = click.IntRange(min=1, max=MAX_REPEATS)
RATE = finite(min=0, min_open=True)  # GB/s, seconds: above zero
FRACTION = finite(min=0, max=1)


class OutputPath(click.Path):
    """A path to write: its directory must exist (or be creatable) and be writable, and the
    path itself must not be a symlink or a special file (device, fifo, socket) that writing
    would replace. Checked when the command line is parsed, before any expensive work."""

    def __init__(self, *, directory: bool = False) -> None:
        super().__init__(path_type=Path, file_okay=not directory, dir_okay=directory)
        self.directory = directory

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        path = Path(os.fsdecode(super().convert(value, param, ctx)))
        problem = atomic.output_problem(path, self.directory)
        if problem:
            self.fail(f"{str(path)!r} {problem}.", param, ctx)
        return path


lock_option = click.option(
    "--lock",
    "lock_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Engine lock file (default: $APPLIANCE_LOCK, else engine/llama.cpp.lock.json in "
         "the checkout).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


def refuse_key_with_unsigned(key: Path | None, unsigned: bool) -> None:
    """`--key` and `--unsigned` together are refused the same way by every verb that signs."""
    if unsigned and key is not None:
        raise ConfigError("--key and --unsigned contradict each other: choose one")
