"""CLI: `appliance image` (build, base, inspect, selftest, push, pin-key, export) and `appliance pull`."""

from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from appliance.cli.options import (
    DEFAULT_SIGNING_KEY,
    json_option,
    lock_option,
    signing_key_option,
    strict_json,
    verify_key_option,
)
from appliance.cli.progress import progress_display
from appliance.core.errors import ApplianceError, IntegrityError
from appliance.engine.lock import Lock, load_lock, write_lock
from appliance.images import labels as L
from appliance.images.base import DEFAULT_EPOCH, make_base, record_in_lock
from appliance.images.build import build_image
from appliance.images.builders import BUILDERS, DEFAULT_JOBS
from appliance.images.compile_check import compile_check
from appliance.images.cuda_base import make_cuda_bases
from appliance.images.inspection import InspectReport, drift_message, inspect_image
from appliance.images.registry_api import REGISTRY_TIMEOUT_S
from appliance.images.selftest import selftest
from appliance.release.published import preview_pull, pull_published

source_option = click.option(
    "--source",
    "source_spec",
    default="canonical",
    show_default=True,
    help="canonical, a stand-in name from the lock (b10068, b10229), or a local llama.cpp dir.",
)


@click.group("image")
def image_group() -> None:
    """Build, inspect, publish and pull engine images."""


@image_group.command("build")
@click.option("--target", "target", required=True, help="cpu, sm89 or sm120 (the lock's targets).")
@source_option
@click.option("--experimental", multiple=True, help="Add an experimental patch (repeatable).")
@click.option(
    "--jobs",
    type=click.IntRange(1, 1024),
    default=DEFAULT_JOBS,
    show_default=True,
    help="Parallel compile jobs.",
)
@click.option(
    "--builder",
    type=click.Choice(BUILDERS),
    default="auto",
    show_default=True,
    help="BuildKit via a docker client that has it, or the SDK's classic builder.",
)
@click.option(
    "--cuda",
    "cuda_version",
    default=None,
    help="GPU targets: build on another CUDA toolkit of the lock (cuda_toolkits), e.g. 12.8.1 "
    "for the nvidia/cuda bases. Default: the target's own.",
)
@lock_option
@json_option
def build(
    target: str,
    source_spec: str,
    experimental: tuple[str, ...],
    jobs: int,
    builder: str,
    cuda_version: str | None,
    lock_path: Path | None,
    as_json: bool,
) -> None:
    """Build the engine image for TARGET from a verified, patched source (reused if unchanged)."""
    lock = load_lock(lock_path)
    lock.target_on(target, cuda_version)
    console = Console(stderr=True)
    with progress_display(quiet=as_json) as progress:
        result = build_image(
            lock,
            target,
            source_spec,
            experimental,
            jobs,
            builder,
            progress=progress,
            cuda_version=cuda_version,
        )
    if as_json:
        click.echo(
            strict_json(
                {
                    "tag": result.tag,
                    "image_id": result.image_id,
                    "reused": result.reused,
                    "builder": result.builder,
                    "seconds": round(result.seconds, 1),
                    "log": str(result.log_path) if result.log_path else None,
                    "labels": result.labels,
                },
                indent=2,
            )
        )
        return
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    if L.cuda_summary(result.labels):
        console.print(f"[bold yellow]{L.cuda_summary(result.labels)}[/]")
    source_kind = result.labels.get(L.SOURCE_KIND)
    if source_kind != "canonical":
        console.print(
            f"[bold yellow]{str(source_kind).upper()} source "
            f"{result.labels.get(L.SOURCE_NAME)}: not the canonical pin[/]"
        )
    if result.reused:
        click.echo(f"{result.tag} is up to date (inputs unchanged): {result.image_id}")
    else:
        click.echo(
            f"built {result.tag} {result.image_id} in {result.seconds:.0f} s "
            f"({result.builder}); log {result.log_path}"
        )


@image_group.command("base")
@click.option(
    "--epoch",
    default=DEFAULT_EPOCH,
    show_default=True,
    help="SOURCE_DATE_EPOCH for mmdebstrap and the image config.",
)
@click.option(
    "--write-lock/--no-write-lock",
    "write_lock_flag",
    default=False,
    show_default=True,
    help="Point the lock's cpu target at the new bases (tags and image IDs).",
)
@click.option(
    "--cuda",
    "cuda_versions",
    multiple=True,
    help="Also make the CUDA build and runtime bases of this pypi-wheels toolkit of the lock "
    "(repeatable); every wheel is verified against the lock before Docker is called.",
)
@click.option(
    "--cuda-only",
    is_flag=True,
    default=False,
    help="Make only the CUDA bases (and the Debian bases they sit on, when missing).",
)
@click.option(
    "--wheels",
    "wheels_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder holding the lock's wheel files (machines without PyPI). Default: fetch from PyPI.",
)
@lock_option
def base(
    epoch: int,
    write_lock_flag: bool,
    cuda_versions: tuple[str, ...],
    cuda_only: bool,
    wheels_dir: Path | None,
    lock_path: Path | None,
) -> None:
    """Make the registry-free Debian bases with mmdebstrap, and CUDA bases from pinned wheels."""
    lock = load_lock(lock_path)
    for version in cuda_versions:
        toolkit = lock.cuda_toolkit(version)
        if toolkit.kind != "pypi-wheels":
            raise ApplianceError(
                f"CUDA {version} comes from nvidia/cuda images ({toolkit.build_base}): "
                "`docker pull` them where a registry is reachable; only pypi-wheels toolkits are made here"
            )
    if cuda_only and not cuda_versions:
        raise ApplianceError("--cuda-only needs --cuda VERSION")
    if not cuda_only:
        runtime = make_base("runtime-slim", epoch, log=click.echo)
        build_base = make_base("build", epoch, log=click.echo)
        if write_lock_flag:
            write_lock(record_in_lock(lock.raw, runtime, build_base), lock.path)
            click.echo(f"recorded both bases in {lock.path} (targets.cpu)")
    for version in cuda_versions:
        make_cuda_bases(lock, version, source=wheels_dir, epoch=epoch, log=click.echo)


@image_group.command("check-compile")
@click.option("--target", "target", required=True)
@click.option("--build-base", required=True, help="Local toolchain image to compile on.")
@click.option("--cmake-arg", "cmake_args", multiple=True, help="Extra CMake argument (repeatable).")
@source_option
@click.option("--jobs", type=click.IntRange(1, 1024), default=DEFAULT_JOBS, show_default=True)
@lock_option
def check_compile(
    target: str,
    build_base: str,
    cmake_args: tuple[str, ...],
    source_spec: str,
    jobs: int,
    lock_path: Path | None,
) -> None:
    """Compile TARGET's build stage on a local toolchain image (no image is kept)."""
    lock = load_lock(lock_path)
    with progress_display() as progress:
        log_path, seconds = compile_check(
            lock, target, source_spec, build_base, cmake_args, jobs, progress=progress
        )
    click.echo(f"{target} build stage compiled on {build_base} in {seconds:.0f} s; log {log_path}")


def _print_report(report: InspectReport, console: Console) -> None:
    console.print(f"[bold]{report.ref}[/] {report.image_id} ({report.size_bytes / 1e6:.1f} MB)")
    table = Table("label", "value")
    for key in sorted(report.labels):
        table.add_row(key, report.labels[key])
    console.print(table)
    if report.drifts:
        drift = Table("drifted label", "in image", "lock says", "meaning", title="DRIFT")
        for d in report.drifts:
            drift.add_row(d.label, str(d.in_image), d.expected, d.meaning)
        console.print(drift)
    else:
        console.print("[green]matches the lock[/]")


@image_group.command("inspect")
@click.argument("image")
@lock_option
@json_option
def inspect(image: str, lock_path: Path | None, as_json: bool) -> None:
    """Check IMAGE's labels against the lock and the patch series; exit 3 on drift."""
    report = inspect_image(load_lock(lock_path), image)
    if as_json:
        click.echo(
            strict_json(
                {
                    "ref": report.ref,
                    "image_id": report.image_id,
                    "size_bytes": report.size_bytes,
                    "matches": report.matches,
                    "labels": report.labels,
                    "drift": [asdict(d) for d in report.drifts],
                },
                indent=2,
            )
        )
    else:
        _print_report(report, Console())
    if not report.matches:
        raise IntegrityError(drift_message(report))


@image_group.command("selftest")
@click.argument("image")
@json_option
def selftest_command(image: str, as_json: bool) -> None:
    """Run the tools' --help and ldd inside IMAGE; check non-root and no compiler."""
    checks = selftest(image)
    if as_json:
        click.echo(strict_json([asdict(c) for c in checks], indent=2))
    else:
        for check in checks:
            click.echo(f"{'PASS' if check.ok else 'FAIL'}  {check.name:32} {check.detail}")
    failed = [c.name for c in checks if not c.ok]
    if failed:
        raise ApplianceError(f"selftest of {image} failed: {', '.join(failed)}")


@image_group.command("push")
@click.option("--target", "target", required=True)
@click.option(
    "--registry", required=True, help="host[:port][/namespace] of the registry, e.g. ghcr.io/OWNER."
)
@click.option(
    "--image",
    "image_ref",
    default=None,
    help="Local image to push (default: the newest one built from this lock without experimental patches).",
)
@signing_key_option("the image's record; its public key must be pinned in the lock (`image pin-key`)")
@lock_option
@json_option
def push(
    target: str, registry: str, image_ref: str | None, key: Path | None, lock_path: Path | None, as_json: bool
) -> None:
    """Publish TARGET's image: push it by digest and record the digest and a record signed by a
    release key in the lock's published_images, which `appliance pull TARGET` checks."""
    from appliance.attest.dsse import load_signer
    from appliance.release.published import publish_image

    signer = load_signer(key)
    entry = publish_image(load_lock(lock_path), target, registry, signer, image_ref)
    if as_json:
        click.echo(strict_json({k: v for k, v in entry.items() if k != "record"}, indent=2))
        return
    click.echo(
        f"pushed {entry['tag']} as {entry['reference']} ({entry['transfer_bytes'] / 1e6:.1f} MB to pull); "
        f"record signed by {signer.public_key.keyid} and written to the lock"
    )


@image_group.command("pin-key")
@click.argument("public_key", type=click.Path(path_type=Path, exists=True))
@lock_option
def pin_key(public_key: Path, lock_path: Path | None) -> None:
    """Pin the release key PUBLIC_KEY (a .pub.json file or key directory) in the lock: pulls
    accept published images whose record it signed. The private half stays with the release."""
    from appliance.release.published import pin_release_key

    lock = load_lock(lock_path)
    click.echo(f"pinned release key {pin_release_key(lock, public_key)} in {lock.path}")


@image_group.command("export")
@click.argument("target")
@click.argument("archive", metavar="FILE", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--image",
    "image_ref",
    default=None,
    help="Local image to export (default: the newest one built from this lock without experimental patches).",
)
@signing_key_option("the sidecar")
@click.option("--force", is_flag=True, help="Replace FILE and its sidecar if they exist.")
@lock_option
@json_option
def export(
    target: str,
    archive: Path,
    image_ref: str | None,
    key: Path | None,
    force: bool,
    lock_path: Path | None,
    as_json: bool,
) -> None:
    """Write TARGET's image to FILE (a docker archive) and FILE.sidecar.json, signed; an
    existing FILE is replaced only with --force, and FILE's directory must exist."""
    from appliance.attest.dsse import load_signer
    from appliance.images.archive import check_export_paths, export_image, sidecar_path

    check_export_paths(archive, force)  # before Docker or the key is asked
    signer = load_signer(key)
    with progress_display(quiet=as_json) as progress:
        sidecar = export_image(load_lock(lock_path), target, archive, signer, image_ref, progress, force)
    if as_json:
        click.echo(
            strict_json(
                {
                    **sidecar.record(),
                    "archive_path": str(archive),
                    "sidecar_path": str(sidecar_path(archive)),
                },
                indent=2,
            )
        )
        return
    click.echo(
        f"exported {sidecar.tag} {sidecar.image_id} to {archive} "
        f"({sidecar.archive_bytes} bytes, sha256 {sidecar.archive_sha256}); "
        f"sidecar {sidecar_path(archive)} signed by {sidecar.keyid}"
    )


def _pull_from(
    lock_path: Path | None, target: str, archive: Path, key: Path | None, tag: str | None, quiet: bool
) -> InspectReport:
    from appliance.attest.dsse import default_key_dir, load_public_key
    from appliance.images.archive import (
        load_image_archive,
        read_sidecar,
        sidecar_path,
        verify_sidecar,
    )

    lock = load_lock(lock_path)
    if not archive.is_file():
        raise ApplianceError(f"{archive}: no such archive (write one with `appliance image export`)")
    public = load_public_key(key or default_key_dir())
    sidecar = read_sidecar(sidecar_path(archive))
    with progress_display(quiet=quiet) as progress:
        return load_image_archive(
            lock, target, archive, sidecar, lambda s: verify_sidecar(s, public), tag, progress
        )


@click.command("pull")
@click.argument("target")
@click.option(
    "--from",
    "archive",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Load from a docker archive written by `appliance image "
    "export` (with its FILE.sidecar.json) instead of the registry.",
)
# not must_exist: a --key without --from is refused by name first, as before
@verify_key_option("the sidecar of --from", default=DEFAULT_SIGNING_KEY, must_exist=False)
@click.option(
    "--tag", default=None, help="With --from: tag the loaded image REF instead of the tag in the sidecar."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the signed record and ask the registry; print size, CUDA build, driver floor and digest.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1, 600),
    default=REGISTRY_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for the registry's answer before giving up.",
)
@lock_option
@json_option
def pull(
    target: str,
    archive: Path | None,
    key: Path | None,
    tag: str | None,
    dry_run: bool,
    timeout: float,
    lock_path: Path | None,
    as_json: bool,
) -> None:
    """Pull TARGET's published image by the digest the lock records, after checking the record
    a release signed (with a key the lock pins), or load it --from an exported archive; either
    way the image is checked against the lock before it is tagged."""
    if archive is None and (key is not None or tag is not None):
        raise ApplianceError("--key and --tag only go with --from FILE")
    if archive is not None and dry_run:
        raise ApplianceError("--dry-run previews a registry pull: leave out --from")
    if archive is not None:
        report = _pull_from(lock_path, target, archive, key, tag, as_json)
        if as_json:
            click.echo(
                strict_json(
                    {
                        "ref": report.ref,
                        "image_id": report.image_id,
                        "matches": report.matches,
                        "from": str(archive),
                    },
                    indent=2,
                )
            )
        else:
            click.echo(
                f"loaded {report.image_id} from {archive} as {report.ref}: signed "
                "sidecar verified, matches the lock"
            )
        return
    lock = load_lock(lock_path)
    if dry_run:
        _preview(lock, target, timeout, as_json)
        return
    report = pull_published(lock, target, timeout)
    if as_json:
        click.echo(
            strict_json({"ref": report.ref, "image_id": report.image_id, "matches": report.matches}, indent=2)
        )
    else:
        click.echo(f"pulled {report.image_id} as {report.ref}: signed record verified, matches the lock")


def _preview(lock: Lock, target: str, timeout: float, as_json: bool) -> None:
    facts = preview_pull(lock, target, timeout).facts()
    if as_json:
        click.echo(strict_json(facts, indent=2))
        return
    size = f"{facts['transfer_bytes'] / 1e6:.1f} MB to download (from the {facts['transfer_bytes_from']})"
    gpu = (
        f"CUDA {facts['cuda_version']}, SASS {facts['cuda_sass']} + PTX {facts['cuda_ptx']}, "
        f"needs NVIDIA driver {facts['min_driver']} or newer"
        if facts["cuda_version"]
        else "no CUDA (cpu image)"
    )
    click.echo(
        f"{facts['reference']}\n  {size}\n  {gpu}\n  source {facts['source']}, image {facts['image_id']}"
    )
    click.echo(f"  record signed by release key {facts['signed_by']}: verified; nothing pulled")
    if facts["registry_problem"]:
        click.echo(f"  registry not asked: {facts['registry_problem']}")


COMMANDS: list[click.Command] = [image_group, pull]
