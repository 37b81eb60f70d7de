"""Run bundles: finalize a run directory (manifest + attestation) and verify one offline.

A finalized bundle holds, next to the run's own files, `manifest.json` (sha256 and size of
every file, the bundle digest, which key signed) and `attestation.dsse.json` (a DSSE envelope
around an in-toto Statement v1 whose subjects are the same files). Verification is a list of
named checks, MLPerf-checker style: each passes, fails or warns with a reason, and names the
files involved. A run that did not complete verifies as incomplete, never as complete.
"""

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from securesystemslib.signer import Signer, SSlibKey

from appliance import __version__
from appliance.attest.dsse import (
    PREDICATE_TYPE,
    envelope_for,
    load_signer,
    make_statement,
    public_key_from_dict,
    read_envelope,
    verify_envelope,
)
from appliance.attest.provenance import PROVENANCE_FILE, collect_run_provenance, write_provenance
from appliance.core import atomic
from appliance.core.digests import canonical_json, sha256_bytes, sha256_file
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.nesting import MAX_NESTING, max_nesting

MANIFEST_FILE = "manifest.json"
ATTESTATION_FILE = "attestation.dsse.json"
RUN_FILE = "run.json"
MANIFEST_VERSION = 1
RUN_STATUSES = ("complete", "incomplete", "failed")
SEALING_FILES = (MANIFEST_FILE, ATTESTATION_FILE)

Status = Literal["pass", "fail", "warn"]


@dataclass
class Check:
    """One named verification step and its outcome; files names what it concerns."""

    name: str
    status: Status
    reason: str
    files: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status != "fail"


def bundle_files(run_dir: Path) -> tuple[dict[str, Path], list[str]]:
    """(relative path -> file) for the run's own files, and the relative paths of symlinks.

    manifest.json and attestation.dsse.json seal the bundle and are not part of its contents.
    """
    files: dict[str, Path] = {}
    links: list[str] = []
    for dirpath, dirnames, filenames in os.walk(run_dir):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            full = Path(dirpath) / name
            rel = full.relative_to(run_dir).as_posix()
            if rel in SEALING_FILES:
                continue
            if full.is_symlink():
                links.append(rel)
            elif full.is_file():
                files[rel] = full
    return files, links


def bundle_digest(digests: dict[str, str]) -> str:
    """sha256 of the canonical JSON of {relative path: sha256}: names a bundle's contents."""
    return sha256_bytes(canonical_json(digests))


def read_run_record(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RUN_FILE
    try:
        run = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{run_dir}: no {RUN_FILE}: not a run directory") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(run, dict) or run.get("status") not in RUN_STATUSES:
        raise ConfigError(f"{path}: status must be one of {', '.join(RUN_STATUSES)}")
    return run


def _signer_for(key: Path | Signer | None) -> Signer | None:
    if key is None or isinstance(key, Signer):
        return key
    return load_signer(key)


def _current_digests(run_dir: Path) -> dict[str, str]:
    files, links = bundle_files(run_dir)
    if links:
        raise IntegrityError(f"{run_dir}: symbolic links cannot be bundled: {', '.join(links)}")
    return {rel: sha256_file(path) for rel, path in files.items()}


def finalize_bundle(run_dir: Path, key: Path | Signer | None = None,
                    docker_client: Any = None) -> None:
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
    provenance = json.loads((run_dir / PROVENANCE_FILE).read_text())
    digests = _current_digests(run_dir)
    digest = bundle_digest(digests)
    predicate = {
        "run": {"status": run["status"], "profile": run.get("profile"),
                "started_utc": run.get("started_utc"), "ended_utc": run.get("ended_utc")},
        "bundle_digest": digest,
        "provenance": provenance,
    }
    envelope = envelope_for(make_statement(digests, predicate), signer)
    attestation_bytes = (json.dumps(envelope, indent=2) + "\n").encode()
    atomic.write_bytes(run_dir / ATTESTATION_FILE, attestation_bytes)
    public = signer.public_key if signer is not None else None
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "created_by": f"appliance {__version__}",
        "run_status": run["status"],
        "bundle_digest": digest,
        "files": {rel: {"sha256": d, "bytes": (run_dir / rel).stat().st_size}
                  for rel, d in sorted(digests.items())},
        "attestation": {
            "file": ATTESTATION_FILE,
            "sha256": sha256_bytes(attestation_bytes),
            "signed": public is not None,
            "public_key": {"keyid": public.keyid, **public.to_dict()} if public else None,
        },
    }
    atomic.write_json(run_dir / MANIFEST_FILE, manifest, sort_keys=False)


def sealed_digests_match(run_dir: Path) -> list[str]:
    """Files that differ from a previous manifest (added, removed, changed); [] when none."""
    try:
        manifest = json.loads((run_dir / MANIFEST_FILE).read_text())
        recorded = {rel: entry["sha256"] for rel, entry in manifest["files"].items()}
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return []
    current = _current_digests(run_dir)
    names = set(recorded) | set(current)
    return sorted(rel for rel in names if recorded.get(rel) != current.get(rel))


def _mapping(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one: what a tampered file holds where an
    object belongs is treated as absent, and the check that needs it fails."""
    return value if isinstance(value, dict) else {}


class _Verifier:
    """Runs the named checks over one bundle; each method appends one Check."""

    def __init__(self, run_dir: Path, pubkey: SSlibKey | None) -> None:
        self.run_dir = run_dir
        self.pubkey = pubkey
        self.checks: list[Check] = []
        self.manifest: dict[str, Any] | None = None
        self.statement: dict[str, Any] | None = None
        self.envelope: Any = None
        self.on_disk: dict[str, str] = {}

    def add(self, name: str, status: Status, reason: str, files: list[str] | None = None) -> None:
        self.checks.append(Check(name, status, reason, sorted(files or [])))

    def _load_json(self, name: str) -> Any:
        try:
            text = (self.run_dir / name).read_text()
            if max_nesting(text) > MAX_NESTING:
                return ...
            return json.loads(text)
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError):  # JSONDecodeError, or a number too long
            return ...

    def check_manifest(self) -> None:
        manifest = self._load_json(MANIFEST_FILE)
        if manifest is None:
            self.add("manifest", "fail", f"{MANIFEST_FILE} is missing: the bundle was never "
                     "finalized (run `appliance bundle sign DIR`)", [MANIFEST_FILE])
        elif (manifest is ... or not isinstance(manifest, dict)
              or not isinstance(manifest.get("files"), dict)):
            self.add("manifest", "fail", f"{MANIFEST_FILE} is not a valid manifest",
                     [MANIFEST_FILE])
        else:
            self.manifest = manifest
            self.add("manifest", "pass", f"{MANIFEST_FILE} lists {len(manifest['files'])} files")

    def check_attestation(self) -> None:
        raw = self._load_json(ATTESTATION_FILE)
        if raw is None or raw is ...:
            problem = "missing" if raw is None else "not JSON"
            self.add("attestation", "fail", f"{ATTESTATION_FILE} is {problem}", [ATTESTATION_FILE])
            return
        try:
            self.envelope, statement = read_envelope(raw)
        except IntegrityError as exc:
            self.add("attestation", "fail", str(exc), [ATTESTATION_FILE])
            return
        if statement.get("predicateType") != PREDICATE_TYPE or not isinstance(
                statement.get("subject"), list):
            self.add("attestation", "fail", f"statement lacks subjects or has predicate type "
                     f"{statement.get('predicateType')!r}, expected {PREDICATE_TYPE!r}",
                     [ATTESTATION_FILE])
            return
        self.statement = statement
        self.add("attestation", "pass", f"in-toto Statement v1 with {len(statement['subject'])} "
                 "subjects in a DSSE envelope")
        if self.manifest is not None:
            recorded = _mapping(self.manifest.get("attestation")).get("sha256")
            actual = sha256_file(self.run_dir / ATTESTATION_FILE)
            if recorded == actual:
                self.add("attestation-digest", "pass", "attestation file matches the manifest")
            else:
                self.add("attestation-digest", "fail", "attestation file changed since the "
                         "bundle was sealed (statement or signature edited)", [ATTESTATION_FILE])

    def check_signature(self) -> None:
        if self.envelope is None:
            self.add("signature", "fail", "no readable attestation to check")
            return
        recorded = _mapping(_mapping(self.manifest).get("attestation"))
        if not self.envelope.signatures:
            if self.pubkey is not None:
                self.add("signature", "fail", f"bundle is unsigned, but --key {self.pubkey.keyid} "
                         "was required")
            elif recorded.get("signed"):
                self.add("signature", "fail", "manifest says signed, but the attestation carries "
                         "no signature (signature removed)", [ATTESTATION_FILE])
            else:
                self.add("signature", "warn", "bundle is explicitly unsigned: contents are "
                         "checked, their origin is not")
            return
        key = self.pubkey
        how = "the given key"
        if key is None:
            embedded = recorded.get("public_key")
            if not isinstance(embedded, dict):
                self.add("signature", "fail", "signed, but no public key given (--key) and none "
                         "recorded in the manifest", [MANIFEST_FILE])
                return
            try:
                key = public_key_from_dict(embedded)
            except (KeyError, ValueError, TypeError):
                self.add("signature", "fail", "manifest's public key is malformed", [MANIFEST_FILE])
                return
            how = "the key recorded in the bundle (pass --key PUB to check who signed)"
        try:
            verify_envelope(self.envelope, key)
        except IntegrityError as exc:
            self.add("signature", "fail", str(exc), [ATTESTATION_FILE])
            return
        status: Status = "pass" if self.pubkey is not None else "warn"
        self.add("signature", status, f"valid ed25519 signature by {key.keyid}, checked with {how}")

    def check_files(self) -> None:
        files, links = bundle_files(self.run_dir)
        if links:
            self.add("plain-files", "fail", "symbolic links are not allowed in a bundle", links)
        else:
            self.add("plain-files", "pass", f"{len(files)} regular files, no symbolic links")
        self.on_disk = {rel: sha256_file(path) for rel, path in files.items()}

    def check_subjects(self) -> None:
        if self.statement is None:
            self.add("subjects-cover-files", "fail", "no statement to compare the files with")
            return
        subjects: dict[str, str] = {}
        for entry in self.statement["subject"]:
            if isinstance(entry, dict) and isinstance(entry.get("digest"), dict):
                subjects[str(entry.get("name"))] = str(entry["digest"].get("sha256"))
        added = sorted(set(self.on_disk) - set(subjects))
        removed = sorted(set(subjects) - set(self.on_disk))
        changed = sorted(rel for rel in set(subjects) & set(self.on_disk)
                         if subjects[rel] != self.on_disk[rel])
        if added or removed:
            parts = [f"added: {', '.join(added)}" if added else "",
                     f"removed: {', '.join(removed)}" if removed else ""]
            self.add("subjects-cover-files", "fail", "; ".join(p for p in parts if p),
                     added + removed)
        else:
            self.add("subjects-cover-files", "pass", f"the statement's {len(subjects)} subjects "
                     "are exactly the bundle's files")
        if changed:
            self.add("file-digests", "fail", f"changed: {', '.join(changed)}", changed)
        else:
            self.add("file-digests", "pass", f"{len(set(subjects) & set(self.on_disk))} file "
                     "digests recomputed and equal to the statement's")
        if self.manifest is not None:
            listed = {rel: _mapping(e).get("sha256") for rel, e in self.manifest["files"].items()}
            differ = sorted(rel for rel in set(listed) | set(subjects)
                            if listed.get(rel) != subjects.get(rel))
            if differ:
                self.add("manifest-matches-statement", "fail", "manifest and statement disagree "
                         f"on: {', '.join(differ)}", differ)
            else:
                self.add("manifest-matches-statement", "pass", "manifest lists the statement's "
                         "subjects with the same digests")
            expected = bundle_digest(subjects)
            if self.manifest.get("bundle_digest") == expected == _mapping(
                    self.statement.get("predicate")).get("bundle_digest"):
                self.add("bundle-digest", "pass", f"bundle digest {expected}")
            else:
                self.add("bundle-digest", "fail", "bundle digest in manifest or predicate does "
                         f"not match the subjects ({expected})", [MANIFEST_FILE])

    def check_run_status(self) -> None:
        try:
            run = read_run_record(self.run_dir)
        except ConfigError as exc:
            self.add("run-status", "fail", str(exc).replace(str(self.run_dir), "bundle"),
                     [RUN_FILE])
            return
        claimed = _mapping(_mapping(_mapping(self.statement).get("predicate")).get("run")).get(
            "status")
        if self.statement is not None and claimed != run["status"]:
            self.add("run-status", "fail", f"{RUN_FILE} says {run['status']!r}, the attested "
                     f"predicate says {claimed!r}", [RUN_FILE])
        elif run["status"] == "complete":
            self.add("run-status", "pass", "run completed")
        else:
            self.add("run-status", "fail", f"run is {run['status']}: this bundle records a run "
                     "that did not complete", [RUN_FILE])


def verify_bundle(run_dir: Path, pubkey: SSlibKey | Path | None = None) -> list[Check]:
    """Every named check over the bundle at run_dir, in a fixed order; nothing is modified."""
    if not run_dir.is_dir():
        raise ApplianceError(f"{run_dir}: not a directory")
    if isinstance(pubkey, Path):
        from appliance.attest.dsse import load_public_key

        pubkey = load_public_key(pubkey)
    verifier = _Verifier(run_dir, pubkey)
    verifier.check_manifest()
    verifier.check_attestation()
    verifier.check_signature()
    verifier.check_files()
    verifier.check_subjects()
    verifier.check_run_status()
    return verifier.checks


def verdict(checks: list[Check]) -> str:
    """"failed" when any integrity check fails; "incomplete" when only the run status does."""
    failing = [c for c in checks if c.status == "fail"]
    if any(c.name != "run-status" for c in failing):
        return "failed"
    if failing:
        return "incomplete"
    return "verified"


def checks_as_json(checks: list[Check]) -> dict[str, Any]:
    return {"verdict": verdict(checks), "checks": [asdict(c) for c in checks]}
