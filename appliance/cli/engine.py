"""CLI: `appliance engine` (the lock and verified llama.cpp sources)."""

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from appliance.cli.options import json_option, lock_option
from appliance.lock import load_lock


@click.group("engine")
def engine_group() -> None:
    """The engine lock and verified llama.cpp sources."""


@engine_group.command("show")
@lock_option
@json_option
def show(lock_path: Path | None, as_json: bool) -> None:
    """Print the engine lock and its canonical digest."""
    lock = load_lock(lock_path)
    if as_json:
        click.echo(json.dumps({"digest": lock.digest, "lock": lock.raw}, indent=2))
        return
    console = Console()
    console.print(f"[bold]engine lock[/] {lock.path}")
    console.print(f"digest       sha256:{lock.digest}")
    up = lock.upstream
    console.print(f"upstream     {up.repository} @ {up.commit} ({up.release})")
    table = Table("stand-in", "package", "llama.cpp", "relation", "sdist sha256")
    for s in lock.stand_ins.values():
        table.add_row(s.name, f"{s.package}=={s.version}", s.release, s.relation, s.sdist_sha256)
    console.print(table)
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


COMMANDS: list[click.Command] = [engine_group]
