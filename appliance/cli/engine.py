"""CLI: `appliance engine` (the lock and verified llama.cpp sources)."""

from pathlib import Path

import click

from appliance.cli.engine_build import build as build_command
from appliance.cli.options import json_option, lock_option, strict_json
from appliance.engine.lock import load_lock


@click.group("engine")
def engine_group() -> None:
    """The engine lock and verified llama.cpp sources."""


@engine_group.command("show")
@lock_option
@json_option
def show(lock_path: Path | None, as_json: bool) -> None:
    """Print the engine lock and its canonical digest: the pin, its stand-ins, the tracks (the
    canonical one and any newer, with the patches that have variants there), patches, targets."""
    lock = load_lock(lock_path)
    if as_json:
        click.echo(strict_json({"digest": lock.digest, "lock": lock.raw}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]engine lock[/] {lock.path}")
    console.print(f"digest       sha256:{lock.digest}")
    up = lock.upstream
    console.print(f"upstream     {up.repository} @ {up.commit} ({up.release})")
    table = Table("stand-in", "package", "llama.cpp", "relation", "sdist sha256")
    for s in lock.stand_ins.values():
        table.add_row(s.name, f"{s.package}=={s.version}", s.release, s.relation, s.sdist_sha256)
    console.print(table)
    tracks = Table("track", "llama.cpp", "sources", "patch variants")
    canonical = ", ".join(["canonical", *sorted(lock.bracket_stand_ins)])
    tracks.add_row("canonical", up.release, canonical, "none (the series as it is)")
    for track in lock.tracks.values():
        tracks.add_row(track.name, track.release, track.stand_in, ", ".join(sorted(track.variants)) or "none")
    console.print(tracks)
    patches = Table("status", "patch", "sha256")
    for status, entries in lock.patches.items():
        for p in entries:
            patches.add_row(status, p.file, p.sha256[:16])
    console.print(patches)
    targets = Table("target", "build base", "runtime base", "CUDA", "archs", "min driver")
    for t in lock.targets.values():
        targets.add_row(
            t.name,
            t.build_base,
            t.runtime_base,
            t.cuda.version if t.cuda else "-",
            t.cuda.architectures if t.cuda else "-",
            t.cuda.min_driver if t.cuda else "-",
        )
    console.print(targets)


@engine_group.command("fetch")
@click.option(
    "--source",
    "source_spec",
    default="canonical",
    show_default=True,
    help="canonical (git clone at the pin), a stand-in name from the lock (b10068, b10229), "
    "or a local llama.cpp directory (recorded as unverified).",
)
@lock_option
@json_option
def fetch(source_spec: str, lock_path: Path | None, as_json: bool) -> None:
    """Fetch and verify a llama.cpp source tree into the cache; print its identity.

    Stand-in archives are checked against the lock's sha256 before extraction; a second
    fetch downloads nothing; a corrupted cache entry is detected and repaired.
    """
    from rich.console import Console

    from appliance.cli.progress import progress_display
    from appliance.core.progress import BYTES, Progress
    from appliance.engine.source import fetch_source

    lock = load_lock(lock_path)
    console = Console(stderr=True)
    with progress_display(quiet=as_json) as show:

        def progress(_: str, done: int, total: int | None) -> None:
            show(Progress(f"fetching {source_spec}", done, total, BYTES))

        tree = fetch_source(lock, source_spec, progress)
    for note in tree.notes:
        console.print(f"[yellow]note:[/] {note}")
    if as_json:
        click.echo(
            strict_json(
                {
                    "path": str(tree.path),
                    "identity": tree.identity,
                    "downloaded_bytes": tree.downloaded_bytes,
                    "repaired": tree.repaired,
                },
                indent=2,
            )
        )
        return
    ident = tree.identity
    if not ident.get("canonical"):
        label = "STAND-IN, not the canonical pin" if ident["kind"] == "stand-in" else "LOCAL, unverified"
        console.print(f"[bold yellow]{label}[/]")
    release = ident.get("upstream_release", "unknown release")
    click.echo(f"source   {ident['kind']} {ident['name']} ({release})")
    click.echo(f"tree     {tree.path}")
    click.echo(f"digest   sha256:{ident['tree_digest']}")
    click.echo(f"download {tree.downloaded_bytes} bytes")


engine_group.add_command(build_command)

COMMANDS: list[click.Command] = [engine_group]
