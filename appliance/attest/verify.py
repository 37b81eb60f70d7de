"""Offline verification of a bundle, failing closed: one verdict, an exit status, named checks.

A bundle is `verified` only when every check passes and a signature over its statement is by a
trusted key (the trust store, or the one key passed with --key). Otherwise exactly one verdict
says why, in this order: `tampered` (contents, statement or seal inconsistent), `unsigned`,
`untrusted` (a valid signature by a key you do not trust), `incomplete` (a faithful record of
a run that did not complete). `--allow-untrusted` / `--allow-unsigned` accept the second and
third for exploring someone else's bundle; the verdict still names them.

Every fact the verdict uses comes from the signed statement or is recomputed from the files:
manifest.json is only compared with them. Nothing in the bundle is modified, and no file that
is not a regular file is ever opened.
"""

import os
import posixpath
import re
import stat
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from securesystemslib.signer import SSlibKey

from appliance.attest.bundle import MANIFEST_VERSION, bundle_digest, scan_bundle
from appliance.attest.dsse import (
    PREDICATE_TYPE,
    ParsedEnvelope,
    load_public_key,
    public_key_from_dict,
    read_envelope,
    signed_by,
)
from appliance.attest.trust import keys_of, store_entries, trusted_keys_dir
from appliance.core.checks import Check, Status
from appliance.core.digests import canonical_json, sha256_file
from appliance.core.errors import ConfigError, IntegrityError
from appliance.core.strict_load import parse_json, read_text
from appliance.runs.run_dir import (
    ATTESTATION_FILE,
    DERIVED_FILES,
    MANIFEST_FILE,
    PROVENANCE_FILE,
    RUN_FILE,
    SEALING_FILES,
)
from appliance.runs.status import RunStatus

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
MAX_SEAL_BYTES = 64 << 20
RUN_FIELDS = ("status", "profile", "started_utc", "ended_utc")


# the fields the sealer (appliance.attest.bundle) writes, and no others
MANIFEST_FIELDS = ("manifest_version", "created_by", "run_status", "bundle_digest", "files", "attestation")
ATTESTATION_FIELDS = {"file", "sha256", "signed", "public_key"}
FILE_ENTRY_FIELDS = {"sha256", "bytes"}
PUBLIC_KEY_FIELDS = {"keyid", "keytype", "scheme", "keyval"}


def _manifest_shape_ok(manifest: Any) -> bool:
    if not isinstance(manifest, dict) or set(manifest) != set(MANIFEST_FIELDS):
        return False
    files, attestation = manifest["files"], manifest["attestation"]
    key = attestation.get("public_key") if isinstance(attestation, dict) else None
    return (
        manifest["manifest_version"] == MANIFEST_VERSION
        and isinstance(manifest["created_by"], str)
        and isinstance(files, dict)
        and all(isinstance(e, dict) and set(e) == FILE_ENTRY_FIELDS for e in files.values())
        and isinstance(attestation, dict)
        and set(attestation) == ATTESTATION_FIELDS
        and attestation["file"] == ATTESTATION_FILE
        and (key is None or (isinstance(key, dict) and set(key) == PUBLIC_KEY_FIELDS))
    )


class Verdict(Enum):
    """A bundle's verdict; `exit_code` is `appliance bundle verify`'s exit status."""

    VERIFIED = ("verified", 0)
    TAMPERED = ("tampered", 3)
    UNTRUSTED = ("untrusted", 4)
    UNSIGNED = ("unsigned", 5)
    INCOMPLETE = ("incomplete", 6)

    def __init__(self, label: str, exit_code: int) -> None:
        self.label = label
        self.exit_code = exit_code


ALLOW_FLAGS = {Verdict.UNTRUSTED: "--allow-untrusted", Verdict.UNSIGNED: "--allow-unsigned"}


@dataclass
class Verification:
    """The checks over one bundle, its verdict, and the facts the verdict rests on."""

    checks: list[Check]
    verdict: Verdict
    allowed: frozenset[Verdict] = frozenset()
    signer: str | None = None
    bundle_digest: str | None = None
    run_status: str | None = None
    advice: str = ""

    @property
    def accepted(self) -> bool:
        """Verified, or a verdict the caller explicitly allowed."""
        return self.verdict is Verdict.VERIFIED or self.verdict in self.allowed

    @property
    def exit_code(self) -> int:
        return 0 if self.accepted else self.verdict.exit_code

    @property
    def untrusted_input(self) -> bool:
        """Accepted only because an --allow flag accepted an unknown origin."""
        return self.accepted and self.verdict is not Verdict.VERIFIED

    def summary(self) -> str:
        """One line: the verdict, how it was accepted if it was, and what to do."""
        head = f"verdict: {self.verdict.label.upper()}"
        if self.untrusted_input:
            head += f", accepted by {ALLOW_FLAGS[self.verdict]}"
        return f"{head}: {self.advice}"

    def as_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.label,
            "accepted": self.accepted,
            "exit_code": self.exit_code,
            "untrusted_input": self.untrusted_input,
            "allowed": sorted(ALLOW_FLAGS[v] for v in self.allowed),
            "signer": self.signer,
            "bundle_digest": self.bundle_digest,
            "summary": self.summary(),
            "checks": [check.as_dict() for check in self.checks],
        }


def _field(value: Any, key: str) -> Any:
    """value[key] when value is a JSON object, else None."""
    return value.get(key) if isinstance(value, dict) else None


def _same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values have the same canonical JSON (False when either cannot have one)."""
    try:
        return canonical_json(a) == canonical_json(b)
    except (RecursionError, ValueError, TypeError):
        return False


def _reject_name(name: Any) -> str | None:
    """Why a subject name is not a plain relative path inside the bundle, or None."""
    if not isinstance(name, str) or not name:
        return "not a non-empty string"
    if name.startswith("/") or "\\" in name or "\0" in name:
        return "absolute or not a POSIX path"
    parts = name.split("/")
    if ".." in parts:
        return "contains '..'"
    if posixpath.normpath(name) != name or "." in parts:  # normpath drops every empty part
        return "not normalised"
    if name in SEALING_FILES:
        return "names a sealing file"
    if name in DERIVED_FILES:
        return "names a derived file, which is never sealed"
    return None


@dataclass
class _State:
    """What the checks have established so far."""

    manifest: dict[str, Any] | None = None
    statement: dict[str, Any] | None = None
    envelope: ParsedEnvelope | None = None
    subjects: dict[str, str] = field(default_factory=dict)
    on_disk: dict[str, Path] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)
    origin_check: Check | None = None
    origin: Verdict | None = None
    signer: str | None = None
    signer_note: str = ""
    incomplete: str | None = None
    run_status: str | None = None
    digest: str | None = None


def _strict_json(path: Path, name: str) -> tuple[Any, str | None]:
    """(parsed JSON, None) or (None, why not) for a bundle file, read by the strict reader
    (regular files only, never blocking, bounded; duplicate keys and huge numbers refused)."""
    try:
        return parse_json(read_text(path, MAX_SEAL_BYTES), name), None
    except ConfigError as exc:
        reason = str(exc).removeprefix(f"{path}: ").removeprefix(f"{name}: ")
        return None, f"is not strict JSON ({reason})"


class _Verifier:
    """Runs the named checks over one bundle; each method appends one or more Checks."""

    def __init__(self, run_dir: Path, trusted: dict[str, SSlibKey], given_key: bool) -> None:
        self.run_dir = run_dir
        self.trusted = trusted
        self.given_key = given_key
        self.checks: list[Check] = []
        self.state = _State()

    def add(
        self, name: str, ok: bool, reason: str, files: list[str] | None = None, *, integrity: bool = True
    ) -> bool:
        self.checks.append(Check(name, Status.PASS if ok else Status.FAIL, reason, sorted(files or [])))
        if not ok and integrity:
            self.state.broken.append(name)
        return ok

    def _read_seal(self, name: str) -> tuple[Any, str | None]:
        """(parsed JSON, None) or (None, why it cannot be read) for a sealing file."""
        path = self.run_dir / name
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None, "is missing"
        if not stat.S_ISREG(info.st_mode):
            return None, "is not a regular file"
        if info.st_size > MAX_SEAL_BYTES:
            return None, f"is over {MAX_SEAL_BYTES} bytes"
        return _strict_json(path, name)

    def check_manifest(self) -> None:
        manifest, problem = self._read_seal(MANIFEST_FILE)
        if problem is not None:
            hint = " (seal it with `appliance bundle sign DIR`)" if problem == "is missing" else ""
            self.add("manifest", False, f"{MANIFEST_FILE} {problem}{hint}", [MANIFEST_FILE])
            return
        if not _manifest_shape_ok(manifest):
            self.add(
                "manifest",
                False,
                f"{MANIFEST_FILE} is not a version {MANIFEST_VERSION} manifest (exactly "
                f"{', '.join(MANIFEST_FIELDS)}; attestation naming {ATTESTATION_FILE})",
                [MANIFEST_FILE],
            )
            return
        self.state.manifest = manifest
        self.add("manifest", True, f"{MANIFEST_FILE} lists {len(manifest['files'])} files")

    def check_attestation(self) -> None:
        raw, problem = self._read_seal(ATTESTATION_FILE)
        if problem is not None:
            self.add("attestation", False, f"{ATTESTATION_FILE} {problem}", [ATTESTATION_FILE])
            return
        try:
            envelope, statement = read_envelope(raw)
        except IntegrityError as exc:
            self.add("attestation", False, str(exc), [ATTESTATION_FILE])
            return
        if (
            statement.get("predicateType") != PREDICATE_TYPE
            or not isinstance(statement.get("subject"), list)
            or not isinstance(statement.get("predicate"), dict)
        ):
            self.add(
                "attestation",
                False,
                "statement lacks subjects or a predicate, or has "
                f"predicate type {statement.get('predicateType')!r}, expected "
                f"{PREDICATE_TYPE!r}",
                [ATTESTATION_FILE],
            )
            return
        self.state.envelope, self.state.statement = envelope, statement
        self.add(
            "attestation",
            True,
            f"in-toto Statement v1 with {len(statement['subject'])} subjects in a DSSE envelope",
        )
        if self.state.manifest is not None:
            recorded = self.state.manifest["attestation"].get("sha256")
            actual = sha256_file(self.run_dir / ATTESTATION_FILE)
            self.add(
                "attestation-digest",
                recorded == actual,
                "attestation file matches the manifest"
                if recorded == actual
                else "attestation file differs from the sha256 in the manifest (statement or "
                "signature changed after sealing)",
                [] if recorded == actual else [ATTESTATION_FILE],
            )

    def _recorded_key(self) -> SSlibKey | None:
        embedded = ((self.state.manifest or {}).get("attestation") or {}).get("public_key")
        try:
            return public_key_from_dict(embedded) if embedded is not None else None
        except ValueError:
            return None

    def check_signature(self) -> None:
        envelope = self.state.envelope
        if envelope is None:
            self.add("signature", False, "no readable attestation to check")
            return
        claimed = ((self.state.manifest or {}).get("attestation") or {}).get("signed")
        if not envelope.signatures:
            if claimed is True:
                self.add(
                    "signature",
                    False,
                    "the manifest says signed, but the attestation carries no signature (signature removed)",
                    [ATTESTATION_FILE],
                )
                return
            self.state.origin = Verdict.UNSIGNED
            self.state.signer_note = "the bundle is unsigned: its origin is unknown"
            self.add("signature", False, "the attestation carries no signature", integrity=False)
            self.state.origin_check = self.checks[-1]
            return
        for keyid, key in sorted(self.trusted.items()):
            if signed_by(envelope, key):
                self.state.signer = keyid
                named = self._recorded_key()
                written_key = (self.state.manifest or {}).get("attestation", {}).get("public_key", {}) or {}
                if self.state.manifest is not None and (
                    claimed is not True
                    or named is None
                    or named.keyid != keyid
                    or written_key.get("keyid") != keyid
                ):
                    self.add(
                        "signature",
                        False,
                        f"valid ed25519 signature by {keyid}, but {MANIFEST_FILE} does not record "
                        "that key as the signer (attestation.signed, attestation.public_key)",
                        [MANIFEST_FILE],
                    )
                    return
                how = "the key given with --key" if self.given_key else "a trusted key"
                self.add("signature", True, f"valid ed25519 signature by {keyid}, {how}")
                return
        recorded = self._recorded_key()
        if recorded is not None and signed_by(envelope, recorded):
            self.state.origin = Verdict.UNTRUSTED
            self.state.signer = recorded.keyid
            where = (
                "is not the key given with --key"
                if self.given_key
                else f"is not in the trust store ({trusted_keys_dir()})"
            )
            self.state.signer_note = f"valid signature by key {recorded.keyid}, which {where}"
            self.add(
                "signature",
                False,
                f"valid ed25519 signature by {recorded.keyid} (id "
                f"recomputed from the key in {MANIFEST_FILE}), which {where}",
                integrity=False,
            )
            self.state.origin_check = self.checks[-1]
            return
        keys = "the given key" if self.given_key else "any trusted key"
        self.add(
            "signature",
            False,
            f"no signature verifies with {keys} or with the key "
            f"recorded in {MANIFEST_FILE}: the statement or signature was altered",
            [ATTESTATION_FILE],
        )

    def check_files(self) -> None:
        regular, odd = scan_bundle(self.run_dir)
        self.state.on_disk = regular
        if odd:
            self.add(
                "plain-files",
                False,
                "not regular files: " + ", ".join(f"{rel} ({kind})" for rel, kind in odd),
                [rel for rel, _ in odd],
            )
        else:
            self.add("plain-files", True, f"{len(regular)} regular files, nothing else")

    def check_subject_names(self) -> None:
        statement = self.state.statement
        if statement is None:
            self.add("subject-names", False, "no statement to read subjects from")
            return
        problems: list[str] = []
        named: list[str] = []
        seen: dict[str, str] = {}
        for index, entry in enumerate(statement["subject"]):
            name = entry.get("name") if isinstance(entry, dict) else None
            digest = (entry.get("digest") if isinstance(entry, dict) else None) or {}
            why = _reject_name(name)
            if why is None and (
                not isinstance(digest, dict)
                or not isinstance(digest.get("sha256"), str)
                or not SHA256_HEX.fullmatch(digest["sha256"])
            ):
                why = "has no sha256 digest of 64 lowercase hex digits"
            if why is None and name in seen:
                why = "is listed twice"
            if why is not None or not isinstance(name, str):
                problems.append(f"subject {index} {name!r}: {why}")
                named += [name] if isinstance(name, str) else []
                continue
            seen[name] = digest["sha256"]
        if self.add(
            "subject-names",
            not problems,
            "; ".join(problems) if problems else f"{len(seen)} distinct, normalised relative subject names",
            named,
        ):
            self.state.subjects = seen

    def check_subjects(self) -> None:
        subjects, on_disk = self.state.subjects, self.state.on_disk
        if self.state.statement is None or not subjects and self.state.broken:
            self.add("subjects-cover-files", False, "no valid subjects to compare the files with")
            return
        added = sorted(set(on_disk) - set(subjects))
        removed = sorted(set(subjects) - set(on_disk))
        parts = [
            f"added: {', '.join(added)}" if added else "",
            f"removed: {', '.join(removed)}" if removed else "",
        ]
        self.add(
            "subjects-cover-files",
            not (added or removed),
            "; ".join(p for p in parts if p)
            or f"the statement's {len(subjects)} subjects are exactly the bundle's regular files",
            added + removed,
        )
        common = sorted(set(subjects) & set(on_disk))
        digests = {rel: sha256_file(on_disk[rel]) for rel in common}
        changed = [rel for rel in common if digests[rel] != subjects[rel]]
        self.add(
            "file-digests",
            not changed,
            f"changed: {', '.join(changed)}"
            if changed
            else f"{len(common)} file digests recomputed and equal to the statement's",
            changed,
        )
        if not (added or removed or changed):
            self.state.digest = bundle_digest(subjects)

    def check_manifest_agrees(self) -> None:
        manifest, subjects = self.state.manifest, self.state.subjects
        if manifest is None or self.state.statement is None:
            return
        differ = []
        for rel in sorted(set(manifest["files"]) | set(subjects)):
            entry = manifest["files"].get(rel) or {}
            path = self.state.on_disk.get(rel)
            size = path.stat().st_size if path is not None else None
            if entry.get("sha256") != subjects.get(rel) or entry.get("bytes") != size:
                differ.append(rel)
        self.add(
            "manifest-matches-statement",
            not differ,
            "manifest and statement disagree on: " + ", ".join(differ)
            if differ
            else "manifest lists the statement's subjects with the same digests and the files' sizes",
            differ,
        )
        expected = bundle_digest(subjects)
        predicate = self.state.statement["predicate"]
        agree = manifest.get("bundle_digest") == expected == predicate.get("bundle_digest")
        self.add(
            "bundle-digest",
            agree,
            f"bundle digest {expected}"
            if agree
            else f"bundle digest in the manifest or the predicate does not match the subjects ({expected})",
            [] if agree else [MANIFEST_FILE],
        )

    def _subject_json(self, name: str) -> tuple[Any, str | None]:
        path = self.state.on_disk.get(name)
        if path is None or name not in self.state.subjects:
            return None, f"{name} is not a subject of the statement"
        data, problem = _strict_json(path, name)
        return data, None if problem is None else f"{name} {problem}"

    def check_provenance(self) -> None:
        if self.state.statement is None:
            return
        signed = self.state.statement["predicate"].get("provenance")
        record, problem = self._subject_json(PROVENANCE_FILE)
        if problem is None and not _same_json(record, signed):
            problem = (
                f"{PROVENANCE_FILE} differs from the provenance in the signed predicate "
                "(compared as canonical JSON)"
            )
        self.add(
            "provenance",
            problem is None,
            problem or f"{PROVENANCE_FILE} equals the signed predicate's provenance",
            [PROVENANCE_FILE] if problem else [],
        )

    def check_run_status(self) -> None:
        if self.state.statement is None:
            return
        run, problem = self._subject_json(RUN_FILE)
        status = run.get("status") if isinstance(run, dict) else None
        attested = _field(self.state.statement["predicate"].get("run"), "status")
        listed = (self.state.manifest or {}).get("run_status")
        if problem is None and status not in tuple(RunStatus):
            problem = f"{RUN_FILE} status must be one of {', '.join(RunStatus)}"
        if problem is None and not status == attested == listed:
            problem = (
                f"{RUN_FILE} says {status!r}, the signed predicate {attested!r}, the manifest {listed!r}"
            )
        signed_run = self.state.statement["predicate"].get("run")
        differ = [key for key in RUN_FIELDS if _field(run, key) != _field(signed_run, key)]
        if problem is None and differ:
            problem = f"{RUN_FILE} and the signed predicate differ on {', '.join(differ)}"
        if problem is not None:
            self.add("run-status", False, problem, [RUN_FILE])
            return
        self.state.run_status = status
        if status == RunStatus.COMPLETE:
            self.add("run-status", True, "run completed")
            return
        self.state.incomplete = status
        self.add(
            "run-status",
            False,
            f"run is {status}: this bundle records a run that did not complete",
            [RUN_FILE],
            integrity=False,
        )


def _verdict(state: _State, allowed: frozenset[Verdict]) -> tuple[Verdict, str]:
    if state.broken:
        return Verdict.TAMPERED, (
            f"failed {', '.join(state.broken)}: the bundle is not what was sealed; do not use its results"
        )
    if state.origin is not None and state.origin not in allowed:
        if state.origin is Verdict.UNSIGNED:
            return state.origin, (
                f"signature: {state.signer_note}; ask its author for a "
                "signed bundle, or pass --allow-unsigned to explore it anyway"
            )
        return state.origin, (
            f"signature: {state.signer_note}; if you trust its owner, run "
            "`appliance keys trust PUBKEY_FILE` with their public key, or "
            "pass --allow-untrusted to explore it anyway"
        )
    if state.incomplete is not None:
        return Verdict.INCOMPLETE, (
            f"run-status: the run is {state.incomplete}: its results "
            "are partial and cannot be evidence; rerun the profile"
        )
    if state.origin is not None:
        return state.origin, f"signature: {state.signer_note}; contents verified, origin not"
    return Verdict.VERIFIED, (f"every check passed; signed by trusted key {state.signer}")


def verify_bundle(
    run_dir: Path,
    key: SSlibKey | Path | None = None,
    *,
    trusted: dict[str, SSlibKey] | None = None,
    allow_untrusted: bool = False,
    allow_unsigned: bool = False,
) -> Verification:
    """Every named check over the bundle at run_dir, in a fixed order, and the verdict.

    key (a public key or its file) is the only key trusted when given; otherwise the keys in
    `trusted` (default: the trust store). Nothing is modified.
    """
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a directory")
    if isinstance(key, Path):
        key = load_public_key(key)
    skipped: list[Check] = []
    if key is not None:
        trusted = {key.keyid: key}
    elif trusted is None:
        entries = store_entries()
        trusted = keys_of(entries)
        skipped = [
            Check("trust-store", Status.WARN, f"skipped {e.path}: {e.problem}", [str(e.path)])
            for e in entries
            if e.key is None
        ]
    verifier = _Verifier(run_dir, trusted, key is not None)
    verifier.checks.extend(skipped)
    verifier.check_manifest()
    verifier.check_attestation()
    verifier.check_signature()
    verifier.check_files()
    verifier.check_subject_names()
    verifier.check_subjects()
    verifier.check_manifest_agrees()
    verifier.check_provenance()
    verifier.check_run_status()
    allowed = frozenset(
        v for v, on in ((Verdict.UNTRUSTED, allow_untrusted), (Verdict.UNSIGNED, allow_unsigned)) if on
    )
    state = verifier.state
    verdict, advice = _verdict(state, allowed)
    if state.origin in allowed and state.origin_check is not None:
        state.origin_check.status = Status.WARN
    return Verification(
        verifier.checks, verdict, allowed, state.signer, state.digest, state.run_status, advice
    )
