"""Options and argument types shared by several verb groups: every number a user types is
checked here, at the edge, against the range the code behind it can handle."""

import functools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from appliance.core import atomic
from appliance.core.errors import ConfigError
from appliance.core.limits import MAX_REPEATS, MAX_SEED

if TYPE_CHECKING:
    from rich.console import Console

    from appliance.runs.profile import Profile
    from appliance.workflows.run import RunOptions

MAX_COUNT = 1 << 31
MAX_ATTEMPTS = 10  # per trial, on a cluster whose nodes are lost
F = TypeVar("F", bound=Callable[..., Any])  # tokens, steps, batch sizes


class FiniteFloat(click.FloatRange):
    """A float in a range that is also finite: click's FloatRange lets nan and inf through."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def finite(
    min: float | None = None,
    max: float | None = None,  # noqa: A002 - click's names
    min_open: bool = False,
) -> FiniteFloat:
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

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
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
    help="Engine lock file (default: $APPLIANCE_LOCK, else engine/llama.cpp.lock.json in the checkout).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")

DEFAULT_SIGNING_KEY = "the key from `appliance keys init`"
TRUST_STORE = "any key in the trust store, as `appliance keys list` shows"


def signing_key_option(signs: str, *, made_on_first_use: bool = False) -> Callable[[F], F]:
    """`--key` of a verb that signs `signs` (e.g. "the bundle"): a private key file or key
    directory that exists; without it the verb takes the user's default key, which run-like
    verbs make and trust when there is none yet (`made_on_first_use`)."""
    first_use = ", made and trusted on first use" if made_on_first_use else ""
    return click.option(
        "--key",
        "key",
        type=click.Path(path_type=Path, exists=True),
        default=None,
        help=f"Private key file or key directory to sign {signs} with "
        f"(default: {DEFAULT_SIGNING_KEY}{first_use}).",
    )


def verify_key_option(
    signed: str, *, default: str = TRUST_STORE, must_exist: bool = True
) -> Callable[[F], F]:
    """`--key` of a verb that checks a signature on `signed`: the public key file or key
    directory it must be signed with; `default` says which keys count without it."""
    return click.option(
        "--key",
        "key",
        type=click.Path(path_type=Path, exists=must_exist),
        default=None,
        help=f"Public key file or key directory {signed} must be signed with (default: {default}).",
    )


def strict_json(data: Any, **dumps: Any) -> str:
    """`--json` text: standard JSON that any parser reads, so a number that cannot be computed
    (NaN, an infinity) is written as null, never as the NaN/Infinity Python would print."""
    return json.dumps(_finite_only(data), allow_nan=False, **dumps)


def _finite_only(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_only(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_only(item) for item in value]
    return value


def refuse_key_with_unsigned(key: Path | None, unsigned: bool) -> None:
    """`--key` and `--unsigned` together are refused the same way by every verb that signs."""
    if unsigned and key is not None:
        raise ConfigError("--key and --unsigned contradict each other: choose one")


DRY_RUN_HELP = {
    "run": "Print the trial plan and docker parameters only.",
    "sweep": "Print the grid and the predicted time only.",
}


@dataclass(frozen=True)
class TrialArgs:
    """The options `run` and `sweep` share, parsed: one value built once (by trial_options),
    which checks the rules between them when it is made."""

    dry_run: bool
    models_dir: Path
    out: Path | None
    repeats: int | None
    skip_digest_check: bool
    image: str | None
    gpu_index: int | None
    trial_timeout: float | None
    as_json: bool
    key: Path | None
    unsigned: bool
    cluster_address: str | None
    max_attempts: int
    resume: bool
    lock_path: Path | None
    assume_gpu: Any  # a host.gpu.Gpu, or None
    skeleton: bool
    variants: tuple[str, ...] = ()  # --variants: the profile's variants to run (none: all)

    def __post_init__(self) -> None:
        refuse_key_with_unsigned(self.key, self.unsigned)
        refuse_dry_run_only(self.dry_run, self.assume_gpu, self.skeleton)

    def run_options(self) -> "RunOptions":
        """How the trials run and the bundle is sealed, as the workflows take it (a cluster
        address becomes the Ray executor; ray loads only for cluster runs)."""
        from appliance.workflows.run import RunOptions

        executor = None
        if self.cluster_address is not None:
            from appliance.cluster.run import cluster_executor

            executor = cluster_executor(self.cluster_address, self.max_attempts)
        return RunOptions(self.key, self.unsigned, self.trial_timeout, executor, self.resume)

    def profile(self, name_or_path: str) -> "Profile":
        """The profile to run: PROFILE with only the --variants asked for."""
        from appliance.runs.profile import load_profile, select_variants

        return select_variants(load_profile(name_or_path), self.variants)

    def console(self) -> "Console":
        """Where the verb prints: stderr when --json owns stdout; 160 columns into a pipe."""
        import sys

        from rich.console import Console

        return Console(stderr=self.as_json, width=None if sys.stdout.isatty() else 160)


TRIAL_ARGS = tuple(field.name for field in fields(TrialArgs))


def _variant_names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    if not names:
        raise click.BadParameter("name at least one variant, e.g. --variants baseline,demand-mmap")
    return names


def trial_options(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options `run` and `sweep` share: a dry run, where the model is, where the run goes,
    how each trial runs, how the bundle is signed, where the trials execute and what a dry run
    may assume. `what` is "run" or "sweep", for the help texts. The command gets them as one
    `trial: TrialArgs` keyword instead of one parameter each."""
    options = [
        click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP[what]),
        click.option(
            "--models",
            "models_dir",
            required=True,
            type=click.Path(path_type=Path, file_okay=False),
            help="Directory holding the profile's model file (mounted read-only).",
        ),
        click.option(
            "--out",
            type=OutputPath(directory=True),
            default=None,
            help="Run directory to create (default: runs/<profile>-<UTC time>).",
        ),
        click.option("--repeats", type=REPEATS, default=None, help="Override the profile's repeats."),
        click.option(
            "--skip-digest-check",
            is_flag=True,
            help="Check the model's size only, not its sha256 (marked in all output).",
        ),
        click.option("--image", default=None, help="Engine image tag (default: from target and lock)."),
        click.option(
            "--gpu", "gpu_index", type=click.IntRange(min=0), default=None, help="GPU index (default 0)."
        ),
        click.option(
            "--trial-timeout",
            type=RATE,
            default=None,
            metavar="SECONDS",
            help="Stop a trial's engine after this long and record it as timed out.",
        ),
        json_option,
        signing_key_option("the bundle", made_on_first_use=True),
        click.option("--unsigned", is_flag=True, help="Seal the bundle without a signature (it says so)."),
        click.option(
            "--cluster",
            "cluster_address",
            default=None,
            metavar="ADDRESS",
            help="Run the trials on a Ray cluster (HOST:PORT, ray://HOST:PORT or auto), "
            "one per node; see docs/cluster.md.",
        ),
        click.option(
            "--max-attempts",
            type=click.IntRange(min=1, max=MAX_ATTEMPTS),
            default=3,
            show_default=True,
            help="With --cluster: attempts per trial when its node is lost.",
        ),
        click.option(
            "--resume",
            is_flag=True,
            help=f"--out names an incomplete {what} of this profile: run only its missing trials.",
        ),
        click.option(
            "--variants",
            callback=_variant_names,
            default=None,
            metavar="NAMES",
            help="Run only these of the profile's variants (comma-separated, run in the profile's "
            "order; a variant with a future needs that one too). The bundle keeps the whole profile; "
            "its schedule lists the variants that ran.",
        ),
        lock_option,
        assume_gpu_option,
        skeleton_option,
    ]

    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def with_trial_args(**kwargs: Any) -> Any:
            trial = TrialArgs(**{name: kwargs.pop(name) for name in TRIAL_ARGS})
            return command(trial=trial, **kwargs)

        for option in reversed(options):
            with_trial_args = option(with_trial_args)
        return with_trial_args

    return apply


class AssumedGpu(click.ParamType):
    """`--assume-gpu CAPABILITY:MEMORY` (e.g. 8.9:24GiB): a GPU a dry run plans for."""

    name = "CAPABILITY:MEMORY"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import re

        from appliance.core.units import SizeError, format_size, parse_size
        from appliance.host.gpu import Gpu

        if not isinstance(value, str):
            return value
        capability, _, memory = value.partition(":")
        if not re.fullmatch(r"[0-9]{1,2}\.[0-9]", capability) or not memory:
            self.fail(
                f"{value!r} is not CAPABILITY:MEMORY, e.g. 8.9:24GiB (RTX 4090) or 12.0:32GiB (RTX 5090)"
            )
        try:
            size = parse_size(memory)
        except (SizeError, OverflowError) as exc:
            self.fail(f"{value!r}: {exc}")
        if size <= 0:
            self.fail(f"{value!r}: the GPU's memory must be more than 0")
        name = f"assumed GPU (compute capability {capability}, {format_size(size, trim=True)})"
        return Gpu(0, name, capability, "assumed", size, size)


assume_gpu_option = click.option(
    "--assume-gpu",
    type=AssumedGpu(),
    default=None,
    help="Dry run only: plan for this GPU instead of the host's, e.g. 8.9:24GiB (RTX 4090) or "
    "12.0:32GiB (RTX 5090); the output says the GPU is assumed.",
)

skeleton_option = click.option(
    "--skeleton",
    is_flag=True,
    help="Dry run only: accept a header-only file (`appliance model skeleton`) of another size "
    "and digest for the model; every line that depends on it says so.",
)


def refuse_dry_run_only(dry_run: bool, assume_gpu: Any, skeleton: bool) -> None:
    """--assume-gpu and --skeleton describe a host or a file that is not here: dry runs only."""
    for given, flag, why in (
        (assume_gpu is not None, "--assume-gpu", "a real run uses the GPUs it sees"),
        (skeleton, "--skeleton", "a real run needs the model file itself"),
    ):
        if given and not dry_run:
            raise click.UsageError(f"{flag} needs --dry-run: {why}")
