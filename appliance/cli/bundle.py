"""CLI: `appliance bundle`."""

import json
from pathlib import Path

import click

from appliance.attest.bundle import (
    MANIFEST_FILE,
    Check,
    checks_as_json,
    finalize_bundle,
    sealed_digests_match,
    verdict,
    verify_bundle,
)
from appliance.attest.dsse import default_key_dir, existing_default_key
from appliance.cli.options import json_option, refuse_key_with_unsigned
from appliance.core.errors import ApplianceError, IntegrityError

bundle_dir = click.argument("directory", type=click.Path(path_type=Path, file_okay=False,
                                                         exists=True))
MARKS = {"pass": "PASS", "fail": "FAIL", "warn": "WARN"}


@click.group("bundle")
def bundle_group() -> None:
    """Sign and verify run bundles."""


@bundle_group.command("sign")
@bundle_dir
@click.option("--key", "key", type=click.Path(path_type=Path, exists=True), default=None,
              help="Private key file or key directory (default ~/.config/appliance/keys).")
@click.option("--unsigned", is_flag=True, help="Seal the bundle without a signature, on purpose.")
@click.option("--force", is_flag=True, help="Re-seal even though files changed since sealing.")
def bundle_sign(directory: Path, key: Path | None, unsigned: bool, force: bool) -> None:
    """Write the manifest and the signed attestation of a run directory."""
    refuse_key_with_unsigned(key, unsigned)
    if not unsigned and key is None:
        key = existing_default_key()
        if key is None:
            raise ApplianceError(f"no signing key in {default_key_dir()}: run `appliance keys "
                                 "init`, pass --key, or --unsigned to seal without a signature")
    changed = sealed_digests_match(directory)
    if changed and not force:
        raise IntegrityError(f"{len(changed)} files differ from the existing {MANIFEST_FILE} "
                             f"({', '.join(changed[:5])}): check them, then pass --force")
    finalize_bundle(directory, None if unsigned else key)
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    how = "unsigned" if unsigned else f"signed by {manifest['attestation']['public_key']['keyid']}"
    click.echo(f"sealed {len(manifest['files'])} files, {how}; bundle digest "
               f"{manifest['bundle_digest']}")


def print_checks(checks: list[Check]) -> None:
    width = max(len(c.name) for c in checks)
    for check in checks:
        click.echo(f"{MARKS[check.status]}  {check.name:<{width}}  {check.reason}")
    click.echo(f"verdict: {verdict(checks).upper()}")


@bundle_group.command("verify")
@bundle_dir
@click.option("--key", "key", type=click.Path(path_type=Path, exists=True), default=None,
              help="Public key (file or key directory) the bundle must be signed with.")
@json_option
def bundle_verify(directory: Path, key: Path | None, as_json: bool) -> None:
    """Recompute every digest, check the signature and the run status, offline."""
    checks = verify_bundle(directory, key)
    if as_json:
        click.echo(json.dumps(checks_as_json(checks), indent=2))
    else:
        print_checks(checks)
    state = verdict(checks)
    if state == "failed":
        failed = [c.name for c in checks if c.status == "fail"]
        raise IntegrityError(f"bundle verification failed: {', '.join(failed)}")
    if state == "incomplete":
        raise ApplianceError("the bundle verifies, but records an incomplete run")


@bundle_group.command("show")
@bundle_dir
@json_option
def bundle_show(directory: Path, as_json: bool) -> None:
    """Summarize a bundle: run, seal, engine, model and host."""
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text())
        provenance = json.loads((directory / "provenance.json").read_text())
    except FileNotFoundError as exc:
        raise ApplianceError(f"{directory}: {Path(str(exc.filename)).name} missing: seal the "
                             "run with `appliance bundle sign`") from None
    key = manifest["attestation"].get("public_key")
    engine, host, model = provenance["engine"], provenance["host"], provenance["model"]
    summary = {
        "run": provenance["run"],
        "bundle_digest": manifest["bundle_digest"],
        "files": len(manifest["files"]),
        "signed_by": key["keyid"] if key else None,
        "engine": {"lock_sha256": engine["lock_sha256"], "source": engine["source"],
                   "series_sha256": engine["series_sha256"]},
        "image": (provenance.get("image") or {}).get("id"),
        "model": model,
        "host": {k: host.get(k) for k in ("kernel", "cgroup_version", "cpu_model", "ram_bytes",
                                          "swap_bytes", "docker_version")}
                | {"gpus": [g.get("name") for g in host.get("gpus", [])]},
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    for name, value in summary.items():
        text = value if isinstance(value, str | int) or value is None else json.dumps(value)
        click.echo(f"{name:<14} {text}")


COMMANDS: list[click.Command] = [bundle_group]
