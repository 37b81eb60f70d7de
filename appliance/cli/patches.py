"""CLI: `appliance patches` (list, apply, bracket check, dev tree, export, re-pin)."""

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from appliance.cli.options import OutputPath, json_option, lock_option, strict_json
from appliance.core.errors import ApplianceError
from appliance.engine.bracket import (
    BracketReport,
    PatchCheck,
    TrackReport,
    bracket_check,
    require_bracket,
    track_check,
)
from appliance.engine.lock import PATCH_STATUSES, load_lock
from appliance.engine.patch_dev import export_patches, make_dev_tree, move_patch, repin
from appliance.engine.patches import apply_series, patches_dir, selected_patches, verified_patch
from appliance.engine.source import fetch_source

source_option = click.option(
    "--source",
    "source_spec",
    default="b10229",
    show_default=True,
    help="llama.cpp source: canonical, a stand-in name from the lock, or a directory.",
)
experimental_option = click.option(
    "--with-experimental",
    "experimental",
    multiple=True,
    metavar="NAME",
    help="Also apply this experimental patch after the active series (repeatable).",
)


@click.group("patches")
def patches_group() -> None:
    """Manage the llama.cpp patch series (list, apply, bracket check, edit and export)."""


@patches_group.command("list")
@lock_option
@json_option
def list_patches(lock_path: Path | None, as_json: bool) -> None:
    """Every patch the lock names, with status, sha256 and subject (files are verified)."""
    lock = load_lock(lock_path)
    rows: list[dict[str, Any]] = []
    for status in PATCH_STATUSES:
        for entry in lock.patches[status]:
            patch = verified_patch(lock, entry)
            rows.append(
                {
                    "status": status,
                    "file": patch.file,
                    "sha256": patch.sha256,
                    "subject": patch.subject,
                    "touches": patch.touched_files(),
                }
            )
    if as_json:
        click.echo(strict_json(rows, indent=2))
        return
    table = Table("status", "patch", "sha256", "subject")
    for row in rows:
        table.add_row(row["status"], row["file"], row["sha256"][:16], row["subject"])
    Console().print(table)


@patches_group.command("apply")
@lock_option
@source_option
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=OutputPath(directory=True),
    help="New directory for the patched tree.",
)
@experimental_option
@json_option
def apply(
    lock_path: Path | None, source_spec: str, out_dir: Path, experimental: tuple[str, ...], as_json: bool
) -> None:
    """Write a patched copy of a source tree and print its series digest."""
    lock = load_lock(lock_path)
    selected_patches(lock, experimental)  # refuse a damaged series before fetching anything
    source = fetch_source(lock, source_spec)
    patched = apply_series(lock, source, out_dir, experimental)
    if as_json:
        click.echo(
            strict_json(
                {
                    "path": str(patched.path),
                    "series_digest": patched.series_digest,
                    "tree_digest": patched.tree_digest,
                    "source": patched.source,
                    "patches": [{"file": f, "sha256": s, "status": st} for f, s, st in patched.patches],
                },
                indent=2,
            )
        )
        return
    if not source.is_canonical:
        click.echo(
            f"note: source is {source.identity.get('kind')} {source.identity.get('name')}, "
            "not the canonical pin",
            err=True,
        )
    for file, _, status in patched.patches:
        click.echo(f"applied {status}/{file}")
    click.echo(f"series digest sha256:{patched.series_digest}")
    click.echo(f"patched tree  {patched.path} (tree digest sha256:{patched.tree_digest})")


def _print_checks(console: Console, title: str, checks: list[PatchCheck], stand_ins: list[str]) -> None:
    for check in checks:
        applies = ", ".join(
            f"{name}: {'applies' if check.applies[name] is None else 'FAILS'}" for name in stand_ins
        )
        verdict = "[green]ok[/]" if check.ok else "[red]FAIL[/]"
        console.print(f"{title} {check.patch.file} ({applies}) {verdict}")
        for name in stand_ins:
            if check.applies[name]:
                console.print(f"  {name}: {check.applies[name]}")
        table = Table("upstream file", f"{' vs '.join(stand_ins)}", "ok")
        for status in check.files:
            table.add_row(status.path, status.state, "yes" if status.ok else "[red]no[/]")
        console.print(table)


def print_report(report: BracketReport) -> None:
    console = Console()
    _print_checks(console, "active", report.active, report.stand_ins)
    if report.experimental:
        console.print("[bold]experimental patches (each on top of the active series)[/]")
        _print_checks(console, "experimental", report.experimental, report.stand_ins)
    verdict = "passed" if report.ok else "FAILED"
    console.print(f"bracket check {verdict}: {', '.join(report.stand_ins)}")


def print_track(report: TrackReport) -> None:
    console = Console()
    table = Table(
        "patch", f"applies to {report.stand_in}", "variant", f"files changed since {report.compared_with}"
    )
    for check in report.active + report.experimental:
        reason = check.applies[report.stand_in]
        changed = [f.path for f in check.files if f.state == "differs"]
        table.add_row(
            f"{check.patch.status}/{check.patch.file}",
            "yes" if reason is None else f"[red]no[/]: {reason}",
            "yes" if check.patch.file in report.variants else "",
            ", ".join(changed) or "none",
        )
    console.print(table)
    verdict = "applies" if report.ok else "FAILS"
    console.print(f"track {report.track} ({report.stand_in}): the series {verdict}")


@patches_group.command("check")
@lock_option
@json_option
def check(lock_path: Path | None, as_json: bool) -> None:
    """Bracket check: the series applies to every stand-in and touches only identical files."""
    lock = load_lock(lock_path)
    bracket = sorted(lock.bracket_stand_ins)
    require_bracket(lock, bracket)
    trees = {name: fetch_source(lock, name) for name in bracket}
    report = bracket_check(lock, trees)
    newer = bracket[-1]
    tracks = [
        track_check(lock, name, fetch_source(lock, track.stand_in), newer, trees[newer])
        for name, track in sorted(lock.tracks.items())
    ]
    if as_json:
        click.echo(strict_json({**report.as_dict(), "tracks": [t.as_dict() for t in tracks]}, indent=2))
    else:
        print_report(report)
        for track_report in tracks:
            print_track(track_report)
    if not report.ok:
        raise ApplianceError("bracket check failed: see the table above for the patch and file")
    failed = [t.track for t in tracks if not t.ok]
    if failed:
        raise ApplianceError(f"the series does not apply on track {', '.join(failed)}: see the table above")


@patches_group.command("dev")
@lock_option
@source_option
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=OutputPath(directory=True),
    help="New directory for the git checkout.",
)
@experimental_option
def dev(lock_path: Path | None, source_spec: str, out_dir: Path, experimental: tuple[str, ...]) -> None:
    """A git checkout with tag `base` (upstream) and one commit per patch, for editing."""
    lock = load_lock(lock_path)
    patches = make_dev_tree(lock, fetch_source(lock, source_spec), out_dir, experimental)
    for patch in patches:
        click.echo(f"committed {patch.status}/{patch.file}")
    click.echo(f"edit in {out_dir}, then: appliance patches export {out_dir}")


@patches_group.command("export")
@lock_option
@click.argument("dev_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option(
    "--new-as",
    "new_status",
    type=click.Choice(["active", "experimental"]),
    default="active",
    show_default=True,
    help="Status of commits that are new patches.",
)
def export(lock_path: Path | None, dev_dir: Path, new_status: str) -> None:
    """Write the commits after `base` back as patches; rewrite series and re-pin the lock."""
    lock = load_lock(lock_path)
    for item in export_patches(lock, dev_dir, new_status):
        click.echo(f"{'updated' if item.changed else 'unchanged'} {item.status}/{item.file}")
    click.echo(f"rewrote {patches_dir(lock) / 'series'} and the lock's patches section")


@patches_group.command("move")
@lock_option
@click.argument("name")
@click.argument("status", type=click.Choice(["active", "experimental", "rejected"]))
def move(lock_path: Path | None, name: str, status: str) -> None:
    """Move a patch between active (appended to series), experimental and rejected."""
    file, old = move_patch(load_lock(lock_path), name, status)
    click.echo(f"moved {old}/{file} to {status}/; update the folders' README with the evidence")


@patches_group.command("lock")
@lock_option
def lock_command(lock_path: Path | None) -> None:
    """Re-pin the lock's sha256 for the patch files as they are now (after hand edits): the
    series, and each track's variants under patches/llama.cpp/tracks/."""
    lock = load_lock(lock_path)
    for status, entries in repin(lock).items():
        for entry in entries:
            click.echo(f"{status}/{entry['file']} sha256:{entry['sha256']}")


COMMANDS: list[click.Command] = [patches_group]
