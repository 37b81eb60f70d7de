"""CLI: `appliance release-check`."""

from pathlib import Path

import click

from appliance.cli.options import json_option, strict_json
from appliance.core.checks import check_lines, failed, worst
from appliance.core.errors import ApplianceError
from appliance.core.paths import repo_root
from appliance.release.check import DEFAULT_MAX_BYTES, release_check


@click.command("release-check")
@click.option(
    "--root",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="Checkout to check (default: this project's checkout).",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    help="Largest file size allowed in the repository.",
)
@click.option(
    "--history", is_flag=True, help="Scan every blob of every reachable commit, not only the index and HEAD."
)
@json_option
def release_check_command(root: Path | None, max_bytes: int, history: bool, as_json: bool) -> None:
    """Check that the committed and staged files (git's blobs, not the working tree) hold no
    weights, traces, secrets or host details; each finding names the commit that added it."""
    checks = release_check(root or repo_root(), max_bytes, history)
    if as_json:
        click.echo(
            strict_json({"verdict": worst(checks).value, "checks": [c.as_dict() for c in checks]}, indent=2)
        )
    else:
        for line in check_lines(checks):
            click.echo(line)
    failing = [c.name for c in failed(checks)]
    if failing:
        raise ApplianceError(f"release check failed: {', '.join(failing)}")


COMMANDS: list[click.Command] = [release_check_command]
