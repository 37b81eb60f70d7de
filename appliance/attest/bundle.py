"""Run bundles: seal a run directory with a manifest and a (signed) attestation.

A sealed bundle holds, next to the run's own files, `manifest.json` (sha256 and size of every
file, the bundle digest, which key signed) and `attestation.dsse.json` (a DSSE envelope around
an in-toto Statement v1 whose subjects are the same files). Verification lives in
appliance.attest.verify.
"""

import json
import os
import stat
from pathlib import Path
from typing import Any

from securesystemslib.signer import Signer

from appliance import __version__
from appliance.attest.dsse import envelope_for, key_as_dict, load_signer, make_statement
from appliance.attest.manifest import MANIFEST_VERSION, AttestationEntry, FileEntry, Manifest
from appliance.attest.provenance import collect_run_provenance, write_provenance
from appliance.core import atomic
from appliance.core.digests import canonical_json, sha256_bytes, sha256_file
from appliance.core.errors import ConfigError, IntegrityError
from appliance.core.strict_load import load_json
from appliance.runs.records import RunRecord
from appliance.runs.run_dir import (
    ATTESTATION_FILE,
    DERIVED_FILES,
    MANIFEST_FILE,
    PROVENANCE_FILE,
    RUN_FILE,
    SEALING_FILES,
)
from appliance.runs.status import RunStatus

FILE_KINDS = (
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in FILE_KINDS if test(mode)), "special file")


def scan_bundle(run_dir: Path) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    """(relative path -> path) of the run's regular files, and (relative path, kind) of every
    entry that is neither a regular file nor a directory (symlinks, FIFOs, sockets, devices).

    Nothing is followed or opened. manifest.json and attestation.dsse.json seal the bundle and
    are not part of its contents; nor is report.html (derived from it afterwards) while it is a
    regular file.
    """
    regular: dict[str, Path] = {}
    odd: list[tuple[str, str]] = []
    pending = [run_dir]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                path = Path(entry.path)
                rel = path.relative_to(run_dir).as_posix()
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    pending.append(path)
                elif rel in SEALING_FILES or (rel in DERIVED_FILES and stat.S_ISREG(mode)):
                    continue
                elif stat.S_ISREG(mode):
                    regular[rel] = path
                else:
                    odd.append((rel, _kind(mode)))
    return dict(sorted(regular.items())), sorted(odd)


def bundle_digest(digests: dict[str, str]) -> str:
    """sha256 of the canonical JSON of {relative path: sha256}: names a bundle's contents."""
    return sha256_bytes(canonical_json(digests))


def read_run_record(run_dir: Path) -> RunRecord:
    """run.json, read strictly through `RunRecord`; its status is checked first, by name."""
    path = run_dir / RUN_FILE
    run = load_json(path, missing="not found: not a run directory")
    if not isinstance(run, dict) or run.get("status") not in tuple(RunStatus):
        raise ConfigError(f"{path}: status must be one of {', '.join(RunStatus)}")
    return RunRecord.from_json(run, str(path))


def _signer_for(key: Path | Signer | None) -> Signer | None:
    if key is None or isinstance(key, Signer):
        return key
    return load_signer(key)


def _current_digests(run_dir: Path) -> dict[str, str]:
    files, odd = scan_bundle(run_dir)
    if odd:
        raise IntegrityError(
            f"{run_dir}: only regular files can be bundled: "
            + ", ".join(f"{rel} ({kind})" for rel, kind in odd)
        )
    return {rel: sha256_file(path) for rel, path in files.items()}


def finalize_bundle(run_dir: Path, key: Path | Signer | None = None, docker_client: Any = None) -> None:
    """Write manifest.json and the (signed, or explicitly unsigned) attestation for run_dir.

    key is a private key file or key directory from `appliance keys init`, or a Signer.
    provenance.json is collected when the runner did not write one: from the run's inputs,
    this host and, given docker_client, the image named by run.json's image_id. Re-running
    re-seals the directory as it is now.
    """
    run = read_run_record(run_dir)
    signer = _signer_for(key)
    if not (run_dir / PROVENANCE_FILE).exists():
        write_provenance(run_dir, collect_run_provenance(run_dir, docker_client))
    try:
        provenance = load_json(run_dir / PROVENANCE_FILE)
    except ConfigError as exc:
        raise ConfigError(f"{exc}: remove it to have it collected again, or restore it") from None
    digests = _current_digests(run_dir)
    digest = bundle_digest(digests)
    predicate = {
        "run": run.signed(),
        "bundle_digest": digest,
        "provenance": provenance,
    }
    envelope = envelope_for(make_statement(digests, predicate), signer)
    attestation_bytes = (json.dumps(envelope, indent=2) + "\n").encode()
    public = signer.public_key if signer is not None else None
    manifest = Manifest(
        manifest_version=MANIFEST_VERSION,
        created_by=f"appliance {__version__}",
        run_status=run.status,
        bundle_digest=digest,
        files={rel: FileEntry(d, (run_dir / rel).stat().st_size) for rel, d in sorted(digests.items())},
        attestation=AttestationEntry(
            file=ATTESTATION_FILE,
            sha256=sha256_bytes(attestation_bytes),
            signed=public is not None,
            public_key=key_as_dict(public) if public else None,
        ),
    )
    # Both sealing files are written aside first; an old seal (a resumed run's) is replaced
    # only once the new one is whole, and never half by half.
    with (
        atomic.replacing(run_dir / ATTESTATION_FILE) as attestation,
        atomic.replacing(run_dir / MANIFEST_FILE) as manifest_file,
    ):
        attestation.write(attestation_bytes)
        attestation.flush()
        manifest_file.write((json.dumps(manifest.to_json(), indent=2, sort_keys=False) + "\n").encode())


def sealed_digests_match(run_dir: Path) -> list[str]:
    """Files that differ from a previous manifest (added, removed, changed); [] when none."""
    path = run_dir / MANIFEST_FILE
    try:
        recorded = {rel: e.sha256 for rel, e in Manifest.from_json(load_json(path), str(path)).files.items()}
    except ConfigError:  # none, or not one this sealer wrote: nothing to compare with
        return []
    current = _current_digests(run_dir)
    names = set(recorded) | set(current)
    return sorted(rel for rel in names if recorded.get(rel) != current.get(rel))
