"""CLI: `appliance release-check`."""

import json
from pathlib import Path

import click

from appliance.attest.bundle import checks_as_json
from appliance.cli.options import json_option
from appliance.core.errors import ApplianceError
from appliance.core.paths import repo_root
from appliance.release.check import DEFAULT_MAX_BYTES, release_check

MARKS = {"pass": "PASS", "fail": "FAIL", "warn": "WARN"}


@click.command("release-check")
@click.option("--root", type=click.Path(path_type=Path, file_okay=False, exists=True),
              default=None, help="Checkout to check (default: this project's checkout).")
@click.option("--max-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_BYTES,
              show_default=True, help="Largest file size allowed in the repository.")
@json_option
def release_check_command(root: Path | None, max_bytes: int, as_json: bool) -> None:
    """Check that the tracked files hold no weights, traces, secrets or host details."""
    checks = release_check(root or repo_root(), max_bytes)
    if as_json:
        report = checks_as_json(checks)
        report["verdict"] = "fail" if any(c.status == "fail" for c in checks) else "pass"
        click.echo(json.dumps(report, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for check in checks:
            click.echo(f"{MARKS[check.status]}  {check.name:<{width}}  {check.reason}")
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        raise ApplianceError(f"release check failed: {', '.join(failed)}")


COMMANDS: list[click.Command] = [release_check_command]
