"""The `appliance` command line: parses arguments and delegates to the modules that do the work.

Each verb group lives in its own module in this package; expected failures raise
ApplianceError and reach the user as one line on stderr with a non-zero exit status.
"""

import importlib
import signal
import sys
import traceback
from typing import NamedTuple

import click

from appliance import __version__
from appliance.core.errors import ApplianceError


class Verb(NamedTuple):
    module: str
    summary: str


# Each verb's module is imported only when the verb runs, so `appliance --help` and the quick
# verbs do not load docker, numpy, numba or the signing libraries. `summary` is the verb's
# short help as `appliance --help` lists it (a test keeps it equal to the command's own).
VERBS: dict[str, Verb] = {
    "engine": Verb("appliance.cli.engine", "The engine lock and verified llama.cpp sources."),
    "patches": Verb(
        "appliance.cli.patches",
        "Manage the llama.cpp patch series (list, apply, bracket check, edit and export).",
    ),
    "image": Verb("appliance.cli.image", "Build, inspect, publish and pull engine images."),
    "pull": Verb(
        "appliance.cli.image",
        "Pull TARGET's published image by the digest the lock records, after checking the record "
        "a release signed (with a key the lock pins), or load it --from an exported archive; "
        "either way the image is checked against the lock before it is tagged.",
    ),
    "model": Verb(
        "appliance.cli.model",
        "Synthesize MoE GGUF models (tiny, or full size from a skeleton input) and header-only GGUFs.",
    ),
    "plan": Verb(
        "appliance.cli.plan",
        "Plan placement and memory for a GGUF (path, header-only file or URL) under limits.",
    ),
    "run": Verb(
        "appliance.cli.run", "Run an experiment PROFILE (a built-in name or a YAML file) in the engine image."
    ),
    "sweep": Verb(
        "appliance.cli.sweep",
        "Run PROFILE's variants at several memory limits "
        "(interleaved, cold cache each trial), measure the disk once, and set each "
        "trial's reads beside LRU and Belady replays of its own route trace.",
    ),
    "cluster": Verb(
        "appliance.cli.cluster", "Run trials across a lab's machines on Ray: join nodes, list them."
    ),
    "trace": Verb(
        "appliance.cli.trace", "Inspect and replay MoE route traces through expert-cache policies."
    ),
    "bundle": Verb("appliance.cli.bundle", "Sign and verify run bundles."),
    "report": Verb(
        "appliance.cli.report",
        "Write RUN's self-contained HTML report (verified again now): verdict and signer, "
        "profile, the run or sweep table, plots, every trial, the comparison with evidence/ "
        "and provenance.",
    ),
    "evidence": Verb("appliance.cli.evidence", "Published results and comparison of new runs against them."),
    "doctor": Verb(
        "appliance.cli.doctor",
        "Check this machine: Docker engine and cgroups, a "
        "BuildKit client, the NVIDIA runtime, GPUs and driver (NVML), the engine "
        "target that fits, swap, fincore.",
    ),
    "keys": Verb(
        "appliance.cli.keys",
        "Signing keys for run bundles (kept outside any repository) and the keys you trust.",
    ),
    "release-check": Verb(
        "appliance.cli.release_check",
        "Check that the committed and staged "
        "files (git's blobs, not the working tree) hold no weights, traces, "
        "secrets or host details; each finding names the commit that added "
        "it.",
    ),
    "repro": Verb(
        "appliance.cli.repro",
        "Reproduce the published findings on a target (what `make repro-<target>` runs).",
    ),
    "demo": Verb(
        "appliance.cli.demo",
        "The whole pipeline at miniature scale: a tiny synthetic "
        "MoE model swept on the cpu image over the memory limits of profile "
        "tiny-oversub (a quarter, half and 1.2 times the model file; baseline, demand "
        "mmap, demand mmap with route-aware prefetch), one disk probe, one bundle, "
        "verified, every trial's decode reads set beside LRU and Belady replays of its "
        "own route trace, and compared with evidence/.",
    ),
    "scale": Verb(
        "appliance.cli.scale",
        "The experiment at its own scale on the cpu image: the Qwen3.5-35B-A3B-shape and "
        "Qwen3-30B-A3B-shape synthetics (about 18 GB each, made when missing) swept around 8 GiB, "
        "verified, reported and compared with the findings; says first how long and how much disk.",
    ),
}


class LazyGroup(click.Group):
    """A group whose verbs are imported on first use; the listing comes from VERBS."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(VERBS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        verb = VERBS.get(cmd_name)
        if verb is None:
            return None
        module = importlib.import_module(verb.module)
        return next(c for c in module.COMMANDS if c.name == cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [
            (name, click.Command(name, help=VERBS[name].summary).get_short_help_str(limit)) for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="appliance")
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Reproducible MoE expert-cache experiments with a pinned, patched llama.cpp.

    Typical flow: `engine fetch` a verified source, `patches check` the series,
    `image build` the engine, `model synth` a tiny model, `run` a profile,
    `trace replay` the routes, `bundle verify` the result, `evidence compare` it.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _debug_requested(ctx: click.Context | None) -> bool:
    return bool(
        ctx is not None and isinstance(ctx.find_root().obj, dict) and ctx.find_root().obj.get("debug")
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    """The entry point: the only place that turns errors into exit statuses."""
    # SIGTERM cleans up like Ctrl-C: temporary files removed, containers stopped, runs marked
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with cli.make_context("appliance", sys.argv[1:]) as ctx:
            try:
                cli.invoke(ctx)
            except ApplianceError as exc:
                if _debug_requested(ctx):
                    traceback.print_exc()
                click.echo(f"error: {exc}", err=True)
                sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # one line, like every other refusal
        command = exc.ctx.command_path if exc.ctx is not None else "appliance"
        message = " ".join(exc.format_message().split())
        click.echo(f"error: {message} (see `{command} --help`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
