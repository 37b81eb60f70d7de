"""CLI: `appliance bundle`."""

from pathlib import Path
from typing import Any

import click

from appliance.analysis.placement import placement_digest
from appliance.attest.bundle import finalize_bundle, sealed_digests_match
from appliance.attest.dsse import default_key_dir, existing_default_key, public_key_from_dict
from appliance.attest.manifest import Manifest
from appliance.attest.verify import MAX_SEAL_BYTES, Verdict, Verification, verify_bundle
from appliance.cli.options import (
    json_option,
    refuse_key_with_unsigned,
    signing_key_option,
    strict_json,
    verify_key_option,
)
from appliance.core.checks import check_lines
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.strict_load import load_json
from appliance.runs.run_dir import MANIFEST_FILE, RunDir

bundle_dir = click.argument("directory", type=click.Path(path_type=Path, file_okay=False, exists=True))


@click.group("bundle")
def bundle_group() -> None:
    """Sign and verify run bundles."""


@bundle_group.command("sign")
@bundle_dir
@signing_key_option("the bundle")
@click.option("--unsigned", is_flag=True, help="Seal the bundle without a signature, on purpose.")
@click.option("--force", is_flag=True, help="Re-seal even though files changed since sealing.")
def bundle_sign(directory: Path, key: Path | None, unsigned: bool, force: bool) -> None:
    """Write the manifest and the signed attestation of a run directory."""
    refuse_key_with_unsigned(key, unsigned)
    if not unsigned and key is None:
        key = existing_default_key()
        if key is None:
            raise ApplianceError(
                f"no signing key in {default_key_dir()}: run `appliance keys "
                "init`, pass --key, or --unsigned to seal without a signature"
            )
    changed = sealed_digests_match(directory)
    if changed and not force:
        raise IntegrityError(
            f"{len(changed)} files differ from the existing {MANIFEST_FILE} "
            f"({', '.join(changed[:5])}): check them, then pass --force"
        )
    finalize_bundle(directory, None if unsigned else key)
    manifest = _manifest(directory)
    public = manifest.attestation.public_key
    signer = None if unsigned or public is None else public_key_from_dict(public)
    how = "unsigned" if signer is None else f"signed by {signer.keyid}"
    click.echo(f"sealed {len(manifest.files)} files, {how}; bundle digest {manifest.bundle_digest}")


def _manifest(directory: Path) -> Manifest:
    """manifest.json through its record (bounded as the verifier bounds it)."""
    path = RunDir(directory).manifest_file
    return Manifest.from_json(load_json(path, MAX_SEAL_BYTES), str(path))


def print_verification(result: Verification) -> None:
    for line in check_lines(result.checks):
        click.echo(line)
    click.echo(result.summary())


@bundle_group.command(
    "verify",
    epilog=(
        "\b\nExit status (one per verdict):\n"
        + "\n".join(f"  {v.exit_code}  {v.label}" for v in Verdict)
        + "\n  0  also for untrusted / unsigned when --allow-untrusted / --allow-unsigned accept it"
        + "\n  2  not a directory, or a --key file that cannot be read"
    ),
)
@bundle_dir
@verify_key_option("the bundle")
@click.option(
    "--allow-untrusted",
    is_flag=True,
    help="Accept a valid signature by a key you do not trust (exploring someone "
    "else's bundle); the verdict says so.",
)
@click.option(
    "--allow-unsigned",
    is_flag=True,
    help="Accept an unsigned bundle whose contents verify; the verdict says so.",
)
@json_option
def bundle_verify(
    directory: Path, key: Path | None, allow_untrusted: bool, allow_unsigned: bool, as_json: bool
) -> None:
    """Recompute every digest, check the signature against trusted keys and the run status,
    offline. Exits 0 only for a verified bundle (or one an --allow flag accepts)."""
    result = verify_bundle(directory, key, allow_untrusted=allow_untrusted, allow_unsigned=allow_unsigned)
    if as_json:
        click.echo(strict_json(result.as_json(), indent=2))
    else:
        print_verification(result)
    if not result.accepted:
        raise ApplianceError(f"bundle {result.verdict.label}: {result.advice}", exit_code=result.exit_code)


@bundle_group.command("show")
@bundle_dir
@json_option
def bundle_show(directory: Path, as_json: bool) -> None:
    """Summarize a bundle as it claims to be (run, seal, engine, model, host), without
    verifying it: `appliance bundle verify` says whether to believe it."""
    layout = RunDir(directory)
    for path in (layout.manifest_file, layout.provenance_file):
        if not path.exists():
            raise ApplianceError(
                f"{directory}: {path.name} missing: seal the run with `appliance bundle sign`"
            )
    manifest = _manifest(directory)
    provenance = load_json(layout.provenance_file)
    try:
        summary = _summary(manifest, provenance)
        placement = placement_digest(
            load_json(layout.results_file) if layout.results_file.exists() else None,
            layout.run_record().placement if layout.run_file.exists() else None,
        )
        if placement is not None:
            summary["placement"] = placement
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"{directory}: not a bundle this version can show (field {exc} missing or malformed)"
        ) from None
    if as_json:
        click.echo(strict_json(summary, indent=2))
        return
    for name, value in summary.items():
        text = value if isinstance(value, str | int) or value is None else strict_json(value)
        click.echo(f"{name:<14} {text}")
    click.echo("not verified here: run `appliance bundle verify` before trusting any of this")


def _summary(manifest: Manifest, provenance: dict[str, Any]) -> dict[str, Any]:
    key = manifest.attestation.public_key
    try:
        signer = public_key_from_dict(key).keyid if key is not None else None
    except (KeyError, TypeError, ValueError):
        signer = None
    engine, host, model = provenance["engine"], provenance["host"], provenance["model"]
    return {
        "run": provenance["run"],
        "bundle_digest": manifest.bundle_digest,
        "files": len(manifest.files),
        "signed_by": signer,
        "engine": {
            "lock_sha256": engine["lock_sha256"],
            "source": engine["source"],
            "series_sha256": engine["series_sha256"],
        },
        "image": (provenance.get("image") or {}).get("id"),
        "model": model,
        "host": {
            k: host.get(k)
            for k in ("kernel", "cgroup_version", "cpu_model", "ram_bytes", "swap_bytes", "docker_version")
        }
        | {"gpus": [g.get("name") for g in host.get("gpus", [])]},
    }


COMMANDS: list[click.Command] = [bundle_group]
