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
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from securesystemslib.signer import SSlibKey

from appliance.attest.bundle import bundle_digest, scan_bundle
from appliance.attest.dsse import (
    PREDICATE_TYPE,
    ParsedEnvelope,
    load_public_key,
    public_key_from_dict,
    read_envelope,
    signed_by,
)
from appliance.attest.manifest import MANIFEST_VERSION, AttestationEntry, FileEntry, Manifest
from appliance.attest.trust import keys_of, store_entries, trusted_keys_dir
from appliance.core.checks import Check, Status
from appliance.core.digests import canonical_json, sha256_file
from appliance.core.errors import ConfigError, IntegrityError
from appliance.core.strict_load import parse_json, read_text
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

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
MAX_SEAL_BYTES = 64 << 20


# the fields the sealer (appliance.attest.bundle) writes, and no others: the manifest's classes
MANIFEST_FIELDS = Manifest.json_keys()
ATTESTATION_FIELDS = set(AttestationEntry.json_keys())
FILE_ENTRY_FIELDS = set(FileEntry.json_keys())
PUBLIC_KEY_FIELDS = {"keyid", "keytype", "scheme", "keyval"}


class CheckName(StrEnum):
    """The name of each check the verifier reports (`Check.name`, JSON `checks[].name`)."""

    TRUST_STORE = "trust-store"  # a warning per unreadable entry of the trust store
    MANIFEST = "manifest"
    ATTESTATION = "attestation"
    ATTESTATION_DIGEST = "attestation-digest"
    SIGNATURE = "signature"
    PLAIN_FILES = "plain-files"
    SUBJECT_NAMES = "subject-names"
    SUBJECTS_COVER_FILES = "subjects-cover-files"
    FILE_DIGESTS = "file-digests"
    MANIFEST_MATCHES_STATEMENT = "manifest-matches-statement"
    BUNDLE_DIGEST = "bundle-digest"
    PROVENANCE = "provenance"
    RUN_STATUS = "run-status"


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


def _strict_json(path: Path) -> tuple[Any, str | None]:
    """(parsed JSON, None) or (None, why not) for a bundle file, read by the strict reader
    (regular files only, never blocking, bounded; duplicate keys and huge numbers refused)."""
    try:
        return parse_json(read_text(path, MAX_SEAL_BYTES), path), None
    except ConfigError as exc:
        return None, f"is not strict JSON ({str(exc).removeprefix(f'{path}: ')})"


def _read_seal(run_dir: Path, name: str) -> tuple[Any, str | None]:
    """(parsed JSON, None) or (None, why it cannot be read) for a sealing file."""
    path = run_dir / name
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, "is missing"
    if not stat.S_ISREG(info.st_mode):
        return None, "is not a regular file"
    if info.st_size > MAX_SEAL_BYTES:
        return None, f"is over {MAX_SEAL_BYTES} bytes"
    return _strict_json(path)


def _recorded_key(manifest: dict[str, Any] | None) -> SSlibKey | None:
    """The public key the manifest records as the signer's, or None (none, or not a key)."""
    embedded = ((manifest or {}).get("attestation") or {}).get("public_key")
    try:
        return public_key_from_dict(embedded)
    except ValueError:  # absent (None) or not a key
        return None


T = TypeVar("T")


@dataclass(frozen=True)
class Fact(Generic[T]):
    """A fact one check establishes for later ones, of type T; `label` names it in errors."""

    label: str


MANIFEST_DOC: Fact[dict[str, Any]] = Fact("the manifest, of the sealer's shape")
ENVELOPE: Fact[ParsedEnvelope] = Fact("the DSSE envelope")
STATEMENT: Fact[dict[str, Any]] = Fact("the in-toto statement, with subjects and a predicate")
SIGNER: Fact[str] = Fact("the id of the key whose signature verifies")
ORIGIN: Fact[tuple[Verdict, str]] = Fact("an unknown origin (unsigned or untrusted) and why")
ON_DISK: Fact[dict[str, Path]] = Fact("the bundle's regular files")
SUBJECTS: Fact[dict[str, str]] = Fact("the valid subjects, name to sha256")
COVERED: Fact[bool] = Fact("the subjects are exactly the regular files")
DIGEST: Fact[str] = Fact("the bundle digest of the verified subjects")
RUN_STATE: Fact[str] = Fact("the run's status, as the run record, statement and manifest agree on it")


@dataclass(frozen=True)
class Bundle:
    """What every check may read: the bundle's directory and the keys trusted for it."""

    run_dir: Path
    trusted: dict[str, SSlibKey]
    given_key: bool


@dataclass(frozen=True)
class Outcome:
    """One check's result. A failure is tampering unless integrity is False (a run that did not
    complete, or a bundle whose origin is unknown: the verdict says which)."""

    ok: bool
    reason: str
    files: list[str] = field(default_factory=list)
    integrity: bool = True


class Facts:
    """The facts established so far, as one check sees them: only those it declares."""

    def __init__(self, values: dict[Fact[Any], Any], check: "BundleCheck") -> None:
        self._values = values
        self._check = check

    def _declared(self, fact: Fact[Any], declared: tuple[Fact[Any], ...], how: str) -> None:
        if fact not in declared:
            raise LookupError(f"check {self._check.name} {how} {fact.label}, which it does not declare")

    def need(self, fact: Fact[T]) -> T:
        """A fact the check declares in `needs` (present: the check runs only then)."""
        self._declared(fact, self._check.needs, "needs")
        value: T = self._values[fact]
        return value

    def use(self, fact: Fact[T]) -> T | None:
        """A fact the check declares in `uses`: it may be missing."""
        self._declared(fact, self._check.uses, "uses")
        value: T | None = self._values.get(fact)
        return value

    def put(self, fact: Fact[T], value: T) -> None:
        self._declared(fact, self._check.provides, "provides")
        self._values[fact] = value


class BundleCheck:
    """One named check of the verifier. It runs after every check before it in CHECKS, and only
    when every fact it `needs` was established; otherwise it fails with `unmet` as its reason,
    or is left out when `unmet` is None. `uses` are facts it reads when present."""

    name: ClassVar[CheckName]
    needs: ClassVar[tuple[Fact[Any], ...]] = ()
    uses: ClassVar[tuple[Fact[Any], ...]] = ()
    provides: ClassVar[tuple[Fact[Any], ...]] = ()
    unmet: ClassVar[str | None] = None

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        raise NotImplementedError


class ManifestCheck(BundleCheck):
    name = CheckName.MANIFEST
    provides = (MANIFEST_DOC,)

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        manifest, problem = _read_seal(bundle.run_dir, MANIFEST_FILE)
        if problem is not None:
            hint = " (seal it with `appliance bundle sign DIR`)" if problem == "is missing" else ""
            return Outcome(False, f"{MANIFEST_FILE} {problem}{hint}", [MANIFEST_FILE])
        if not _manifest_shape_ok(manifest):
            return Outcome(
                False,
                f"{MANIFEST_FILE} is not a version {MANIFEST_VERSION} manifest (exactly "
                f"{', '.join(MANIFEST_FIELDS)}; attestation naming {ATTESTATION_FILE})",
                [MANIFEST_FILE],
            )
        facts.put(MANIFEST_DOC, manifest)
        return Outcome(True, f"{MANIFEST_FILE} lists {len(manifest['files'])} files")


class AttestationCheck(BundleCheck):
    name = CheckName.ATTESTATION
    provides = (ENVELOPE, STATEMENT)

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        raw, problem = _read_seal(bundle.run_dir, ATTESTATION_FILE)
        if problem is not None:
            return Outcome(False, f"{ATTESTATION_FILE} {problem}", [ATTESTATION_FILE])
        try:
            envelope, statement = read_envelope(raw)
        except IntegrityError as exc:
            return Outcome(False, str(exc), [ATTESTATION_FILE])
        if (
            statement.get("predicateType") != PREDICATE_TYPE
            or not isinstance(statement.get("subject"), list)
            or not isinstance(statement.get("predicate"), dict)
        ):
            return Outcome(
                False,
                "statement lacks subjects or a predicate, or has "
                f"predicate type {statement.get('predicateType')!r}, expected "
                f"{PREDICATE_TYPE!r}",
                [ATTESTATION_FILE],
            )
        facts.put(ENVELOPE, envelope)
        facts.put(STATEMENT, statement)
        return Outcome(
            True, f"in-toto Statement v1 with {len(statement['subject'])} subjects in a DSSE envelope"
        )


class AttestationDigestCheck(BundleCheck):
    name = CheckName.ATTESTATION_DIGEST
    needs = (MANIFEST_DOC, STATEMENT)

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        recorded = facts.need(MANIFEST_DOC)["attestation"].get("sha256")
        actual = sha256_file(bundle.run_dir / ATTESTATION_FILE)
        return Outcome(
            recorded == actual,
            "attestation file matches the manifest"
            if recorded == actual
            else "attestation file differs from the sha256 in the manifest (statement or "
            "signature changed after sealing)",
            [] if recorded == actual else [ATTESTATION_FILE],
        )


class SignatureCheck(BundleCheck):
    name = CheckName.SIGNATURE
    needs = (ENVELOPE,)
    uses = (MANIFEST_DOC,)
    provides = (SIGNER, ORIGIN)
    unmet = "no readable attestation to check"

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        envelope, manifest = facts.need(ENVELOPE), facts.use(MANIFEST_DOC)
        claimed = ((manifest or {}).get("attestation") or {}).get("signed")
        if not envelope.signatures:
            if claimed is True:
                return Outcome(
                    False,
                    "the manifest says signed, but the attestation carries no signature (signature removed)",
                    [ATTESTATION_FILE],
                )
            facts.put(ORIGIN, (Verdict.UNSIGNED, "the bundle is unsigned: its origin is unknown"))
            return Outcome(False, "the attestation carries no signature", integrity=False)
        for keyid, key in sorted(bundle.trusted.items()):
            if signed_by(envelope, key):
                facts.put(SIGNER, keyid)
                named = _recorded_key(manifest)
                written_key = (manifest or {}).get("attestation", {}).get("public_key", {}) or {}
                if manifest is not None and (
                    claimed is not True
                    or named is None
                    or named.keyid != keyid
                    or written_key.get("keyid") != keyid
                ):
                    return Outcome(
                        False,
                        f"valid ed25519 signature by {keyid}, but {MANIFEST_FILE} does not record "
                        "that key as the signer (attestation.signed, attestation.public_key)",
                        [MANIFEST_FILE],
                    )
                how = "the key given with --key" if bundle.given_key else "a trusted key"
                return Outcome(True, f"valid ed25519 signature by {keyid}, {how}")
        recorded = _recorded_key(manifest)
        if recorded is not None and signed_by(envelope, recorded):
            facts.put(SIGNER, recorded.keyid)
            where = (
                "is not the key given with --key"
                if bundle.given_key
                else f"is not in the trust store ({trusted_keys_dir()})"
            )
            facts.put(ORIGIN, (Verdict.UNTRUSTED, f"valid signature by key {recorded.keyid}, which {where}"))
            return Outcome(
                False,
                f"valid ed25519 signature by {recorded.keyid} (id "
                f"recomputed from the key in {MANIFEST_FILE}), which {where}",
                integrity=False,
            )
        keys = "the given key" if bundle.given_key else "any trusted key"
        return Outcome(
            False,
            f"no signature verifies with {keys} or with the key "
            f"recorded in {MANIFEST_FILE}: the statement or signature was altered",
            [ATTESTATION_FILE],
        )


class PlainFilesCheck(BundleCheck):
    name = CheckName.PLAIN_FILES
    provides = (ON_DISK,)

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        regular, odd = scan_bundle(bundle.run_dir)
        facts.put(ON_DISK, regular)
        if odd:
            return Outcome(
                False,
                "not regular files: " + ", ".join(f"{rel} ({kind})" for rel, kind in odd),
                [rel for rel, _ in odd],
            )
        return Outcome(True, f"{len(regular)} regular files, nothing else")


class SubjectNamesCheck(BundleCheck):
    name = CheckName.SUBJECT_NAMES
    needs = (STATEMENT,)
    provides = (SUBJECTS,)
    unmet = "no statement to read subjects from"

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        problems: list[str] = []
        named: list[str] = []
        seen: dict[str, str] = {}
        for index, entry in enumerate(facts.need(STATEMENT)["subject"]):
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
        if problems:
            return Outcome(False, "; ".join(problems), named)
        facts.put(SUBJECTS, seen)
        return Outcome(True, f"{len(seen)} distinct, normalised relative subject names")


class SubjectsCoverFilesCheck(BundleCheck):
    name = CheckName.SUBJECTS_COVER_FILES
    needs = (SUBJECTS, ON_DISK)
    provides = (COVERED,)
    unmet = "no valid subjects to compare the files with"

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        subjects, on_disk = facts.need(SUBJECTS), facts.need(ON_DISK)
        added = sorted(set(on_disk) - set(subjects))
        removed = sorted(set(subjects) - set(on_disk))
        parts = [
            f"added: {', '.join(added)}" if added else "",
            f"removed: {', '.join(removed)}" if removed else "",
        ]
        if not (added or removed):
            facts.put(COVERED, True)
        return Outcome(
            not (added or removed),
            "; ".join(p for p in parts if p)
            or f"the statement's {len(subjects)} subjects are exactly the bundle's regular files",
            added + removed,
        )


class FileDigestsCheck(BundleCheck):
    name = CheckName.FILE_DIGESTS
    needs = (SUBJECTS, ON_DISK)
    uses = (COVERED,)
    provides = (DIGEST,)

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        subjects, on_disk = facts.need(SUBJECTS), facts.need(ON_DISK)
        common = sorted(set(subjects) & set(on_disk))
        digests = {rel: sha256_file(on_disk[rel]) for rel in common}
        changed = [rel for rel in common if digests[rel] != subjects[rel]]
        if facts.use(COVERED) and not changed:
            facts.put(DIGEST, bundle_digest(subjects))
        return Outcome(
            not changed,
            f"changed: {', '.join(changed)}"
            if changed
            else f"{len(common)} file digests recomputed and equal to the statement's",
            changed,
        )


class ManifestMatchesStatementCheck(BundleCheck):
    name = CheckName.MANIFEST_MATCHES_STATEMENT
    needs = (MANIFEST_DOC, STATEMENT, ON_DISK)
    uses = (SUBJECTS,)

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        files, on_disk = facts.need(MANIFEST_DOC)["files"], facts.need(ON_DISK)
        subjects = facts.use(SUBJECTS) or {}
        differ = []
        for rel in sorted(set(files) | set(subjects)):
            entry = files.get(rel) or {}
            path = on_disk.get(rel)
            size = path.stat().st_size if path is not None else None
            if entry.get("sha256") != subjects.get(rel) or entry.get("bytes") != size:
                differ.append(rel)
        return Outcome(
            not differ,
            "manifest and statement disagree on: " + ", ".join(differ)
            if differ
            else "manifest lists the statement's subjects with the same digests and the files' sizes",
            differ,
        )


class BundleDigestCheck(BundleCheck):
    name = CheckName.BUNDLE_DIGEST
    needs = (MANIFEST_DOC, STATEMENT)
    uses = (SUBJECTS,)

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        expected = bundle_digest(facts.use(SUBJECTS) or {})
        predicate = facts.need(STATEMENT)["predicate"]
        agree = facts.need(MANIFEST_DOC).get("bundle_digest") == expected == predicate.get("bundle_digest")
        return Outcome(
            agree,
            f"bundle digest {expected}"
            if agree
            else f"bundle digest in the manifest or the predicate does not match the subjects ({expected})",
            [] if agree else [MANIFEST_FILE],
        )


def _subject_json(facts: Facts, name: str) -> tuple[Any, str | None]:
    """(parsed JSON, None) or (None, why not) for a bundle file that must be a valid subject."""
    path = facts.need(ON_DISK).get(name)
    if path is None or name not in (facts.use(SUBJECTS) or {}):
        return None, f"{name} is not a subject of the statement"
    data, problem = _strict_json(path)
    return data, None if problem is None else f"{name} {problem}"


class ProvenanceCheck(BundleCheck):
    name = CheckName.PROVENANCE
    needs = (STATEMENT, ON_DISK)
    uses = (SUBJECTS,)

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        signed = facts.need(STATEMENT)["predicate"].get("provenance")
        record, problem = _subject_json(facts, PROVENANCE_FILE)
        if problem is None and not _same_json(record, signed):
            problem = (
                f"{PROVENANCE_FILE} differs from the provenance in the signed predicate "
                "(compared as canonical JSON)"
            )
        return Outcome(
            problem is None,
            problem or f"{PROVENANCE_FILE} equals the signed predicate's provenance",
            [PROVENANCE_FILE] if problem else [],
        )


class RunStatusCheck(BundleCheck):
    name = CheckName.RUN_STATUS
    needs = (STATEMENT, ON_DISK)
    uses = (SUBJECTS, MANIFEST_DOC)
    provides = (RUN_STATE,)

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        run, problem = _subject_json(facts, RUN_FILE)
        status = run.get("status") if isinstance(run, dict) else None
        signed_run = facts.need(STATEMENT)["predicate"].get("run")
        attested = _field(signed_run, "status")
        listed = (facts.use(MANIFEST_DOC) or {}).get("run_status")
        if problem is None and status not in tuple(RunStatus):
            problem = f"{RUN_FILE} status must be one of {', '.join(RunStatus)}"
        if problem is None and not status == attested == listed:
            problem = (
                f"{RUN_FILE} says {status!r}, the signed predicate {attested!r}, the manifest {listed!r}"
            )
        differ = [key for key in RunRecord.SIGNED if _field(run, key) != _field(signed_run, key)]
        if problem is None and differ:
            problem = f"{RUN_FILE} and the signed predicate differ on {', '.join(differ)}"
        if problem is None:
            try:
                RunRecord.from_json(run, RUN_FILE)
            except ConfigError as exc:
                problem = str(exc)
        if problem is not None:
            return Outcome(False, problem, [RUN_FILE])
        facts.put(RUN_STATE, str(status))
        if status == RunStatus.COMPLETE:
            return Outcome(True, "run completed")
        return Outcome(
            False,
            f"run is {status}: this bundle records a run that did not complete",
            [RUN_FILE],
            integrity=False,
        )


# The verifier's checks, in the order they run and report: each only after the checks that
# establish what it needs and uses (tests/unit/attest/test_verify_registry.py holds this).
CHECKS: tuple[BundleCheck, ...] = (
    ManifestCheck(),
    AttestationCheck(),
    AttestationDigestCheck(),
    SignatureCheck(),
    PlainFilesCheck(),
    SubjectNamesCheck(),
    SubjectsCoverFilesCheck(),
    FileDigestsCheck(),
    ManifestMatchesStatementCheck(),
    BundleDigestCheck(),
    ProvenanceCheck(),
    RunStatusCheck(),
)


@dataclass
class CheckRun:
    """One run of the registry: the checks' reports in order, the facts they established and
    the names of the checks whose failure means tampering."""

    checks: list[Check] = field(default_factory=list)
    facts: dict[Fact[Any], Any] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)

    def fact(self, fact: Fact[T]) -> T | None:
        value: T | None = self.facts.get(fact)
        return value


def run_checks(bundle: Bundle, checks: tuple[BundleCheck, ...] = CHECKS) -> CheckRun:
    """Each check in order, as its declarations allow."""
    run = CheckRun()
    for check in checks:
        if all(fact in run.facts for fact in check.needs):
            outcome = check.run(bundle, Facts(run.facts, check))
        elif check.unmet is not None:
            outcome = Outcome(False, check.unmet)
        else:
            continue
        status = Status.PASS if outcome.ok else Status.FAIL
        run.checks.append(Check(str(check.name), status, outcome.reason, sorted(outcome.files)))
        if not outcome.ok and outcome.integrity:
            run.broken.append(str(check.name))
    return run


def _provider(fact: Fact[Any]) -> BundleCheck:
    """The one check of the registry that establishes fact."""
    return next(check for check in CHECKS if fact in check.provides)


def _verdict(run: CheckRun, allowed: frozenset[Verdict]) -> tuple[Verdict, str]:
    origin, signer_note = run.fact(ORIGIN) or (None, "")
    state = run.fact(RUN_STATE)
    if run.broken:
        return Verdict.TAMPERED, (
            f"failed {', '.join(run.broken)}: the bundle is not what was sealed; do not use its results"
        )
    if origin is not None and origin not in allowed:
        if origin is Verdict.UNSIGNED:
            return origin, (
                f"signature: {signer_note}; ask its author for a "
                "signed bundle, or pass --allow-unsigned to explore it anyway"
            )
        return origin, (
            f"signature: {signer_note}; if you trust its owner, run "
            "`appliance keys trust PUBKEY_FILE` with their public key, or "
            "pass --allow-untrusted to explore it anyway"
        )
    if state is not None and state != RunStatus.COMPLETE:
        return Verdict.INCOMPLETE, (
            f"run-status: the run is {state}: its results "
            "are partial and cannot be evidence; rerun the profile"
        )
    if origin is not None:
        return origin, f"signature: {signer_note}; contents verified, origin not"
    signer = run.fact(SIGNER)
    return Verdict.VERIFIED, (f"every check passed; signed by trusted key {signer}")


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
            Check(str(CheckName.TRUST_STORE), Status.WARN, f"skipped {e.path}: {e.problem}", [str(e.path)])
            for e in entries
            if e.key is None
        ]
    run = run_checks(Bundle(run_dir, trusted, key is not None))
    allowed = frozenset(
        v for v, on in ((Verdict.UNTRUSTED, allow_untrusted), (Verdict.UNSIGNED, allow_unsigned)) if on
    )
    verdict, advice = _verdict(run, allowed)
    origin, _ = run.fact(ORIGIN) or (None, "")
    if origin in allowed:  # the failure the caller accepted is reported as a warning
        next(c for c in run.checks if c.name == _provider(ORIGIN).name).status = Status.WARN
    return Verification(
        skipped + run.checks,
        verdict,
        allowed,
        run.fact(SIGNER),
        run.fact(DIGEST),
        run.fact(RUN_STATE),
        advice,
    )
