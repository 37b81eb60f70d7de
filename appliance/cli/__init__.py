"""The `appliance` command line: parses arguments and delegates to the modules that do the work.

Each verb group lives in its own module in this package; expected failures raise
ApplianceError and reach the user as one line on stderr with a non-zero exit status.
"""

import sys
import traceback

import click

from appliance import __version__
from appliance.cli import (
    bundle,
    demo,
    doctor,
    engine,
    evidence,
    image,
    keys,
    model,
    patches,
    plan,
    release_check,
    repro,
    run,
    sweep,
    trace,
)
from appliance.core.errors import ApplianceError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


for module in (engine, patches, image, model, plan, run, sweep, trace, bundle, evidence, doctor, keys,
               release_check, repro, demo):
    for command in module.COMMANDS:
        cli.add_command(command)


def main() -> None:
    debug = "--debug" in sys.argv[1:]
    try:
        cli.main(standalone_mode=False, prog_name="appliance")
    except ApplianceError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
