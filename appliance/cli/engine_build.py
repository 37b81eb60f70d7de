"""CLI: `appliance engine build --local` (a verb of the `engine` group)."""

from pathlib import Path

import click

from appliance.cli.options import json_option, lock_option, strict_json
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock


@click.command("build")
@lock_option
@click.option(
    "--local",
    "local",
    is_flag=True,
    help="Build on this host (cmake + ninja, CPU, static); images are `image build`.",
)
@click.option(
    "--source",
    "source_spec",
    default="b10229",
    show_default=True,
    help="llama.cpp source: canonical, a stand-in name from the lock, or a directory.",
)
@click.option(
    "--with-experimental",
    "experimental",
    multiple=True,
    metavar="NAME",
    help="Also apply this experimental patch after the active series (repeatable).",
)
@json_option
def build(
    lock_path: Path | None, local: bool, source_spec: str, experimental: tuple[str, ...], as_json: bool
) -> None:
    """Build the patched llama.cpp (llama-moe-trace, -completion, -bench, -simple), cached."""
    from appliance.engine.local_build import build_source
    from appliance.engine.source import fetch_source

    if not local:
        raise ApplianceError("only --local builds are done here; for images use `appliance image build`")
    lock = load_lock(lock_path)
    source = fetch_source(lock, source_spec)
    if not source.is_canonical:
        click.echo(
            f"note: building from {source.identity.get('kind')} {source.identity.get('name')}, "
            "not the canonical pin",
            err=True,
        )
    bin_dir, record = build_source(
        lock, source, experimental, log=lambda message: click.echo(message, err=True)
    )
    if as_json:
        click.echo(strict_json({"bin_dir": str(bin_dir), **record}, indent=2))
        return
    click.echo(f"series digest sha256:{record['series_digest']}")
    click.echo(f"built in {record['build_seconds']} s; binaries in {bin_dir}:")
    for name in sorted(record["binaries"]):
        click.echo(f"  {bin_dir / name}")
