"""CLI: `appliance report`."""

import webbrowser
from pathlib import Path

import click

from appliance.cli.options import json_option, strict_json, verify_key_option
from appliance.core.errors import ApplianceError
from appliance.runs.run_dir import REPORT_FILE
from appliance.workflows.report_page import make_report


@click.command("report")
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Where to write the page (default: RUN/{REPORT_FILE}).",
)
@click.option("--open", "open_page", is_flag=True, help="Open the page in the default browser afterwards.")
@verify_key_option("the bundle")
@click.option(
    "--allow-untrusted",
    is_flag=True,
    help="Show the figures of an unsigned bundle or one signed by a key you do not trust; "
    "the page says untrusted input.",
)
@json_option
def report_command(
    run_dir: Path, out: Path | None, open_page: bool, key: Path | None, allow_untrusted: bool, as_json: bool
) -> None:
    """Write RUN's self-contained HTML report (verified again now): verdict and signer,
    profile, the run or sweep table, plots, every trial, the comparison with evidence/ and
    provenance. It fetches nothing and is not part of the sealed bundle. A bundle that does not
    verify gets a page with the refusal and no figure, and a non-zero exit status."""
    outcome = make_report(run_dir, out, key, allow_untrusted)
    if as_json:
        click.echo(strict_json(outcome.as_json(), indent=2))
    else:
        click.echo(f"report: {outcome.path}")
        click.echo(f"bundle verification: {outcome.verification.summary()}")
    if open_page and not webbrowser.open(outcome.path.absolute().as_uri()):
        click.echo(f"no browser found: open {outcome.path} yourself", err=True)
    if not outcome.readable:
        raise ApplianceError(
            f"bundle {outcome.verification.verdict.label}: the report shows the refusal and no figure",
            exit_code=outcome.verification.exit_code,
        )


COMMANDS: list[click.Command] = [report_command]
