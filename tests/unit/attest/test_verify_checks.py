"""One tamper per verifier check: for every check name `verify_bundle` reports, a change to a
genuine bundle that this check catches, with the exact verdict and the exact set of checks
that fail. Where the set is that check alone, nothing else in the verifier would notice the
change: a check that always passed would let the tamper through as VERIFIED.

A check that cannot fail alone (later checks read what it established) lists the checks that
fail with it; the enumeration test refuses a check name without a tamper here.
"""

import base64
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.bundle import ATTESTATION_FILE, MANIFEST_FILE
from appliance.attest.dsse import PREDICATE_TYPE
from appliance.attest.verify import MAX_SEAL_BYTES, CheckName, Verdict, verify_bundle
from appliance.core.checks import Status
from tests.tamper import (
    Keys,
    _add_fifo,
    _add_file,
    _edit_manifest,
    _envelope,
    _flip_byte,
    _statement,
    _write_envelope,
    check_named,
    sign_statement,
)
from tests.unit.core.test_limit_edges import padded


def _manifest_version(run: Path, keys: Keys) -> None:
    _edit_manifest(run, lambda m: m.update(manifest_version=m["manifest_version"] + 1))


def _predicate_type(run: Path, keys: Keys) -> None:
    statement = _statement(run)
    statement["predicateType"] = "https://example.invalid/other-predicate"
    sign_statement(run, statement, keys.trusted)


def _attestation_reformatted(run: Path, keys: Keys) -> None:
    """The same envelope (statement and signature untouched) written with other whitespace,
    the manifest's recorded sha256 left as it was: only the recorded digest can tell."""
    (run / ATTESTATION_FILE).write_text(json.dumps(_envelope(run), indent=4) + "\n")


def _statement_note_added(run: Path, keys: Keys) -> None:
    """A predicate field nothing else compares, added after signing: only the signature breaks."""
    envelope = _envelope(run)
    statement = _statement(run)
    statement["predicate"]["note"] = "added after signing"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    _write_envelope(run, envelope)


def _subject_name_absolute(run: Path, keys: Keys) -> None:
    statement = _statement(run)
    statement["subject"][0]["name"] = "/" + statement["subject"][0]["name"]
    sign_statement(run, statement, keys.trusted)


def _manifest_size_wrong(run: Path, keys: Keys) -> None:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["files"]["results.json"]["bytes"] += 1

    _edit_manifest(run, edit)


def _manifest_bundle_digest(run: Path, keys: Keys) -> None:
    _edit_manifest(run, lambda m: m.update(bundle_digest=hashlib.sha256(b"another bundle").hexdigest()))


def _provenance_signed_differs(run: Path, keys: Keys) -> None:
    statement = _statement(run)
    statement["predicate"]["provenance"]["host"]["kernel"] = "0.0.0-not-this-one"
    sign_statement(run, statement, keys.trusted)


def _signed_status_incomplete(run: Path, keys: Keys) -> None:
    """run.json and the manifest say complete, the signed predicate says incomplete."""
    statement = _statement(run)
    statement["predicate"]["run"]["status"] = "incomplete"
    sign_statement(run, statement, keys.trusted)


@dataclass(frozen=True)
class CheckTamper:
    tamper: Callable[[Path, Keys], None]
    verdict: Verdict
    failing: frozenset[str]  # exactly the checks that fail


def _only(name: str, tamper: Callable[[Path, Keys], None]) -> CheckTamper:
    return CheckTamper(tamper, Verdict.TAMPERED, frozenset({name}))


# a bad subject list is not used: these checks, all that compare it, fail, in this order
BAD_SUBJECT_LIST_FAILS = (
    CheckName.SUBJECT_NAMES,
    CheckName.SUBJECTS_COVER_FILES,
    CheckName.MANIFEST_MATCHES_STATEMENT,
    CheckName.BUNDLE_DIGEST,
    CheckName.PROVENANCE,
    CheckName.RUN_STATUS,
)

TAMPER_BY_CHECK: dict[CheckName, CheckTamper] = {
    # the run status is compared with the manifest's, so it fails when there is none to read
    CheckName.MANIFEST: CheckTamper(
        _manifest_version, Verdict.TAMPERED, frozenset({CheckName.MANIFEST, CheckName.RUN_STATUS})
    ),
    # no readable statement: the checks that read it fail too
    CheckName.ATTESTATION: CheckTamper(
        _predicate_type,
        Verdict.TAMPERED,
        frozenset(
            {
                CheckName.ATTESTATION,
                CheckName.SIGNATURE,
                CheckName.SUBJECT_NAMES,
                CheckName.SUBJECTS_COVER_FILES,
            }
        ),
    ),
    CheckName.ATTESTATION_DIGEST: _only(CheckName.ATTESTATION_DIGEST, _attestation_reformatted),
    CheckName.SIGNATURE: _only(CheckName.SIGNATURE, _statement_note_added),
    CheckName.PLAIN_FILES: _only(CheckName.PLAIN_FILES, _add_fifo),
    # a bad subject list is not used: every comparison with it fails too
    CheckName.SUBJECT_NAMES: CheckTamper(
        _subject_name_absolute,
        Verdict.TAMPERED,
        frozenset(BAD_SUBJECT_LIST_FAILS),
    ),
    CheckName.SUBJECTS_COVER_FILES: _only(CheckName.SUBJECTS_COVER_FILES, _add_file),
    CheckName.FILE_DIGESTS: _only(CheckName.FILE_DIGESTS, _flip_byte),
    CheckName.MANIFEST_MATCHES_STATEMENT: _only(CheckName.MANIFEST_MATCHES_STATEMENT, _manifest_size_wrong),
    CheckName.BUNDLE_DIGEST: _only(CheckName.BUNDLE_DIGEST, _manifest_bundle_digest),
    CheckName.PROVENANCE: _only(CheckName.PROVENANCE, _provenance_signed_differs),
    CheckName.RUN_STATUS: _only(CheckName.RUN_STATUS, _signed_status_incomplete),
}


@pytest.fixture
def fresh(tmp_path: Path, genuine: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(genuine, copy, symlinks=True)
    return copy


def test_every_check_the_verifier_reports_has_its_tamper(genuine: Path, trust_store: Path) -> None:
    result = verify_bundle(genuine)
    assert result.verdict is Verdict.VERIFIED
    names = [c.name for c in result.checks]
    assert len(names) == len(set(names)), names
    assert set(names) == set(TAMPER_BY_CHECK)


@pytest.mark.parametrize("check", sorted(TAMPER_BY_CHECK))
def test_a_tamper_only_this_check_catches(check: str, fresh: Path, keys: Keys, trust_store: Path) -> None:
    case = TAMPER_BY_CHECK[check]
    case.tamper(fresh, keys)
    result = verify_bundle(fresh)
    assert result.verdict is case.verdict, result.summary()
    assert result.exit_code == case.verdict.exit_code
    statuses = {c.name: c.status for c in result.checks}
    assert statuses[check] is Status.FAIL
    assert {name for name, status in statuses.items() if status is Status.FAIL} == case.failing
    failed = [c.name for c in result.checks if c.status is Status.FAIL]
    assert result.summary() == (
        f"verdict: TAMPERED: failed {', '.join(failed)}: the bundle is not what was sealed; "
        "do not use its results"
    )


def test_each_check_names_what_it_found(fresh: Path, keys: Keys, trust_store: Path) -> None:
    """The reasons of the lone failures say what differs, not only that something does."""
    _attestation_reformatted(fresh, keys)
    assert check_named(verify_bundle(fresh), CheckName.ATTESTATION_DIGEST).reason == (
        "attestation file differs from the sha256 in the manifest (statement or signature changed "
        "after sealing)"
    )


def test_seal_budget_at_the_limit_and_one_past(tmp_path: Path, genuine: Path, trust_store: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(genuine, bundle)
    manifest = bundle / MANIFEST_FILE
    padded(genuine / MANIFEST_FILE, manifest, MAX_SEAL_BYTES, b"")
    result = verify_bundle(bundle)
    assert {c.name: c.status for c in result.checks}[CheckName.MANIFEST] is Status.PASS
    padded(genuine / MANIFEST_FILE, manifest, MAX_SEAL_BYTES + 1, b"")
    check = {c.name: c for c in verify_bundle(bundle).checks}[CheckName.MANIFEST]
    assert check.status is Status.FAIL
    assert check.reason == f"{MANIFEST_FILE} is over {MAX_SEAL_BYTES} bytes"


def test_every_entry_that_is_not_a_regular_file_is_named(fresh: Path, trust_store: Path) -> None:
    os.mkfifo(fresh / "trials" / "pipe-b")
    os.mkfifo(fresh / "trials" / "pipe-a")
    (fresh / "plots" / "link").symlink_to("decode_tps.png")
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    check = check_named(result, CheckName.PLAIN_FILES)
    assert check.reason == (
        "not regular files: plots/link (symbolic link), trials/pipe-a (FIFO), trials/pipe-b (FIFO)"
    )
    assert check.files == ["plots/link", "trials/pipe-a", "trials/pipe-b"]


def test_every_bad_subject_is_named_not_only_the_first(fresh: Path, keys: Keys, trust_store: Path) -> None:
    statement = _statement(fresh)
    first = len(statement["subject"])
    digest = {"sha256": "0" * 64}
    statement["subject"] += [
        {"name": "/abs", "digest": digest},
        {"name": "a/../b", "digest": digest},
        {"name": 7, "digest": digest},
    ]
    sign_statement(fresh, statement, keys.trusted)
    check = check_named(verify_bundle(fresh), CheckName.SUBJECT_NAMES)
    assert check.status is Status.FAIL
    assert check.reason == (
        f"subject {first} '/abs': absolute or not a POSIX path; "
        f"subject {first + 1} 'a/../b': contains '..'; "
        f"subject {first + 2} 7: not a non-empty string"
    )
    assert check.files == ["/abs", "a/../b"]  # the names that are strings


def test_every_file_added_and_removed_is_named(fresh: Path, trust_store: Path) -> None:
    (fresh / "trials" / "extra-b.txt").write_text("sneaked in\n")
    (fresh / "trials" / "extra-a.txt").write_text("sneaked in\n")
    (fresh / "plots" / "decode_tps.png").unlink()
    (fresh / "inputs" / "lock.json").unlink()
    check = check_named(verify_bundle(fresh), CheckName.SUBJECTS_COVER_FILES)
    assert check.status is Status.FAIL
    assert check.reason == (
        "added: trials/extra-a.txt, trials/extra-b.txt; removed: inputs/lock.json, plots/decode_tps.png"
    )
    assert check.files == [
        "inputs/lock.json",
        "plots/decode_tps.png",
        "trials/extra-a.txt",
        "trials/extra-b.txt",
    ]


@pytest.mark.parametrize(
    ("field", "value"), [("predicate", []), ("predicate", None), ("subject", "results.json")]
)
def test_a_statement_without_a_subject_list_and_a_predicate_object_is_refused(
    field: str, value: object, fresh: Path, keys: Keys, trust_store: Path
) -> None:
    statement = _statement(fresh)
    statement[field] = value
    sign_statement(fresh, statement, keys.trusted)
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    check = check_named(result, CheckName.ATTESTATION)
    assert (check.status, check.files) == (Status.FAIL, [ATTESTATION_FILE])
    assert check.reason == (
        f"statement lacks subjects or a predicate, or has predicate type {PREDICATE_TYPE!r}, "
        f"expected {PREDICATE_TYPE!r}"
    )


def test_every_changed_file_is_named(fresh: Path, trust_store: Path) -> None:
    (fresh / "run.json").write_text("{}")
    (fresh / "results.json").write_text("{}")
    check = check_named(verify_bundle(fresh), CheckName.FILE_DIGESTS)
    assert (check.status, check.reason) == (Status.FAIL, "changed: results.json, run.json")
    assert check.files == ["results.json", "run.json"]


def _added(run: Path) -> None:
    (run / "trials" / "extra.txt").write_text("sneaked in\n")


def _removed(run: Path) -> None:
    (run / "plots" / "decode_tps.png").unlink()


def _changed(run: Path) -> None:
    (run / "plots" / "decode_tps.png").write_bytes(b"not the plot")


@pytest.mark.parametrize("spoil", [_added, _removed, _changed], ids=["added", "removed", "changed"])
def test_no_bundle_digest_is_reported_for_contents_that_differ(
    spoil: Callable[[Path], None], fresh: Path, trust_store: Path
) -> None:
    spoil(fresh)
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    assert result.bundle_digest is None


def test_every_field_the_run_record_and_the_signed_run_differ_on_is_named(
    fresh: Path, keys: Keys, trust_store: Path
) -> None:
    statement = _statement(fresh)
    statement["predicate"]["run"].update(profile="another-profile", ended_utc="2026-01-02T00:00:00Z")
    sign_statement(fresh, statement, keys.trusted)
    check = check_named(verify_bundle(fresh), CheckName.RUN_STATUS)
    assert (check.status, check.files) == (Status.FAIL, ["run.json"])
    assert check.reason == "run.json and the signed predicate differ on profile, ended_utc"
