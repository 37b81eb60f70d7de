"""The verifier's branches that the tamper battery does not reach, each with its exact reason:
subject names and digests, the key given with --key, seals that are missing or not JSON, and
the run record's status and fields."""

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.bundle import ATTESTATION_FILE, MANIFEST_FILE, finalize_bundle
from appliance.attest.verify import CheckName, Verdict, _reject_name, verify_bundle
from appliance.core.checks import Status
from tests.tamper import Keys, _envelope, _statement, _write_envelope, sign_statement
from tests.unit.attest.test_verify_reasons import TAMPERED_SUMMARY


@pytest.fixture
def fresh(tmp_path: Path, genuine: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(genuine, copy, symlinks=True)
    return copy


def _failing(result: Any) -> dict[str, tuple[Status, str, list[str]]]:
    """The checks that did not pass: name -> (status, reason, files)."""
    return {c.name: (c.status, c.reason, list(c.files)) for c in result.checks if c.status is not Status.PASS}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        (None, "not a non-empty string"),
        (5, "not a non-empty string"),
        ("", "not a non-empty string"),
        ("/etc/passwd", "absolute or not a POSIX path"),
        ("/", "absolute or not a POSIX path"),
        ("trials\\x", "absolute or not a POSIX path"),
        ("trials/x\0y", "absolute or not a POSIX path"),
        ("..", "contains '..'"),
        ("../outside", "contains '..'"),
        ("a/../results.json", "contains '..'"),
        ("./results.json", "not normalised"),
        ("trials/./x", "not normalised"),
        ("trials//x", "not normalised"),
        ("trials/", "not normalised"),
        (".", "not normalised"),
        ("manifest.json", "names a sealing file"),
        ("attestation.dsse.json", "names a sealing file"),
        ("trials/manifest.json", None),
        ("results.json", None),
        ("a.b/c..d", None),
    ],
)
def test_which_subject_names_are_refused_and_why(name: Any, why: str | None) -> None:
    assert _reject_name(name) == why


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("results.json", "None: not a non-empty string"),
        ({"name": "results.json"}, "'results.json': has no sha256 digest of 64 lowercase hex digits"),
        (
            {"name": "results.json", "digest": "0" * 64},
            "'results.json': has no sha256 digest of 64 lowercase hex digits",
        ),
        (
            {"name": "results.json", "digest": {"sha256": 5}},
            "'results.json': has no sha256 digest of 64 lowercase hex digits",
        ),
        (
            {"name": "results.json", "digest": {"sha256": "A" * 64}},
            "'results.json': has no sha256 digest of 64 lowercase hex digits",
        ),
        (
            {"name": "results.json", "digest": {"sha256": "a" * 63}},
            "'results.json': has no sha256 digest of 64 lowercase hex digits",
        ),
        (
            {"name": "results.json", "digest": {"sha256": "a" * 65}},
            "'results.json': has no sha256 digest of 64 lowercase hex digits",
        ),
        ({"name": "../results.json", "digest": {"sha256": "a" * 64}}, "'../results.json': contains '..'"),
    ],
    ids=str,
)
def test_a_subject_without_a_plain_name_or_a_sha256_is_named_with_its_index(
    entry: Any, why: str, fresh: Path, keys: Keys, trust_store: Path
) -> None:
    statement = _statement(fresh)
    subjects = [s for s in statement["subject"] if s["name"] != "results.json"]
    statement["subject"] = [*subjects, entry]
    sign_statement(fresh, statement, keys.trusted)
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    named = entry["name"] if isinstance(entry, dict) else None
    assert _failing(result)[CheckName.SUBJECT_NAMES] == (
        Status.FAIL,
        f"subject {len(subjects)} {why}",
        [named] if named else [],
    )


def test_the_key_given_with_key_is_named_as_such(fresh: Path, keys: Keys, trust_store: Path) -> None:
    verified = verify_bundle(fresh, keys.trusted.public)
    signature = {c.name: c for c in verified.checks}[CheckName.SIGNATURE]
    assert verified.verdict is Verdict.VERIFIED
    assert (signature.status, signature.reason) == (
        Status.PASS,
        f"valid ed25519 signature by {keys.trusted.keyid}, the key given with --key",
    )

    other = verify_bundle(fresh, keys.untrusted.public)
    assert other.verdict is Verdict.UNTRUSTED
    assert _failing(other) == {
        CheckName.SIGNATURE: (
            Status.FAIL,
            f"valid ed25519 signature by {keys.trusted.keyid} (id recomputed from the key in "
            "manifest.json), which is not the key given with --key",
            [],
        )
    }
    assert other.summary() == (
        f"verdict: UNTRUSTED: signature: valid signature by key {keys.trusted.keyid}, which is not "
        "the key given with --key; if you trust its owner, run `appliance keys trust PUBKEY_FILE` "
        "with their public key, or pass --allow-untrusted to explore it anyway"
    )


def test_an_altered_statement_with_a_given_key(fresh: Path, keys: Keys, trust_store: Path) -> None:
    envelope, statement = _envelope(fresh), _statement(fresh)
    statement["predicate"]["note"] = "added after signing"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    _write_envelope(fresh, envelope)
    result = verify_bundle(fresh, keys.trusted.public)
    assert result.verdict is Verdict.TAMPERED
    assert _failing(result) == {
        CheckName.SIGNATURE: (
            Status.FAIL,
            "no signature verifies with the given key or with the key recorded in manifest.json: "
            "the statement or signature was altered",
            [ATTESTATION_FILE],
        )
    }


def test_a_signature_removed_while_the_manifest_says_signed_is_tampered(
    fresh: Path, trust_store: Path
) -> None:
    envelope = _envelope(fresh)
    envelope["signatures"] = []
    _write_envelope(fresh, envelope)  # the manifest's recorded digest follows: only the claim is left
    result = verify_bundle(fresh, allow_unsigned=True)
    assert result.verdict is Verdict.TAMPERED and not result.accepted
    assert _failing(result) == {
        CheckName.SIGNATURE: (
            Status.FAIL,
            "the manifest says signed, but the attestation carries no signature (signature removed)",
            [ATTESTATION_FILE],
        ),
    }
    assert result.summary() == TAMPERED_SUMMARY.format(CheckName.SIGNATURE)


def test_an_unsigned_bundle_accepted_warns_on_its_signature_only(fresh: Path, trust_store: Path) -> None:
    finalize_bundle(fresh)
    result = verify_bundle(fresh, allow_unsigned=True)
    assert (result.verdict, result.accepted, result.exit_code) == (Verdict.UNSIGNED, True, 0)
    assert _failing(result) == {
        CheckName.SIGNATURE: (Status.WARN, "the attestation carries no signature", [])
    }
    assert result.summary() == (
        "verdict: UNSIGNED, accepted by --allow-unsigned: signature: the bundle is unsigned: its "
        "origin is unknown; contents verified, origin not"
    )


NO_MANIFEST_RUN_STATUS = (
    Status.FAIL,
    "run.json says 'complete', the signed predicate 'complete', the manifest None",
    ["run.json"],
)
NO_STATEMENT = {
    CheckName.SIGNATURE: (Status.FAIL, "no readable attestation to check", []),
    CheckName.SUBJECT_NAMES: (Status.FAIL, "no statement to read subjects from", []),
    CheckName.SUBJECTS_COVER_FILES: (Status.FAIL, "no valid subjects to compare the files with", []),
}


def _seal_missing(path: Path) -> None:
    path.unlink()


def _seal_a_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    ("seal", "spoil", "reason"),
    [
        (MANIFEST_FILE, _seal_missing, "manifest.json is missing (seal it with `appliance bundle sign DIR`)"),
        (MANIFEST_FILE, _seal_a_directory, "manifest.json is not a regular file"),
        (
            MANIFEST_FILE,
            lambda p: p.write_text("{"),
            "manifest.json is not strict JSON (not valid JSON: Expecting property name enclosed in "
            "double quotes at line 1)",
        ),
        (ATTESTATION_FILE, _seal_missing, "attestation.dsse.json is missing"),
        (ATTESTATION_FILE, _seal_a_directory, "attestation.dsse.json is not a regular file"),
        (
            ATTESTATION_FILE,
            lambda p: p.write_text('{"a": 1, "a": 2}'),
            "attestation.dsse.json is not strict JSON (line 1: duplicate key 'a' (first at line 1))",
        ),
    ],
    ids=["manifest-missing", "manifest-dir", "manifest-not-json", "att-missing", "att-dir", "att-dup-key"],
)
def test_a_seal_that_cannot_be_read_says_why(
    seal: str, spoil: Any, reason: str, fresh: Path, trust_store: Path
) -> None:
    spoil(fresh / seal)
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    if seal == MANIFEST_FILE:
        expected = {
            CheckName.MANIFEST: (Status.FAIL, reason, [MANIFEST_FILE]),
            CheckName.RUN_STATUS: NO_MANIFEST_RUN_STATUS,
        }
    else:
        expected = {CheckName.ATTESTATION: (Status.FAIL, reason, [ATTESTATION_FILE]), **NO_STATEMENT}
    assert _failing(result) == expected


def _changed(name: str) -> dict[str, tuple[Status, str, list[str]]]:
    return {
        CheckName.FILE_DIGESTS: (Status.FAIL, f"changed: {name}", [name]),
        CheckName.MANIFEST_MATCHES_STATEMENT: (
            Status.FAIL,
            f"manifest and statement disagree on: {name}",
            [name],
        ),
    }


def test_a_run_record_with_a_status_that_is_not_one_of_the_three(fresh: Path, trust_store: Path) -> None:
    record = json.loads((fresh / "run.json").read_text())
    record["status"] = "weird"
    (fresh / "run.json").write_text(json.dumps(record))
    assert _failing(verify_bundle(fresh)) == {
        **_changed("run.json"),
        CheckName.RUN_STATUS: (
            Status.FAIL,
            "run.json status must be one of complete, incomplete, failed",
            ["run.json"],
        ),
    }


@pytest.mark.parametrize(
    ("name", "check"), [("run.json", CheckName.RUN_STATUS), ("provenance.json", CheckName.PROVENANCE)]
)
def test_a_subject_the_verifier_reads_that_is_not_json(
    name: str, check: str, fresh: Path, trust_store: Path
) -> None:
    (fresh / name).write_text("[1,")
    assert _failing(verify_bundle(fresh)) == {
        **_changed(name),
        check: (
            Status.FAIL,
            f"{name} is not strict JSON (not valid JSON: Expecting value at line 1)",
            [name],
        ),
    }


@pytest.mark.parametrize("field", ["profile", "started_utc", "ended_utc"])
def test_the_run_record_and_the_signed_run_differ_on_one_field(
    field: str, fresh: Path, keys: Keys, trust_store: Path
) -> None:
    statement = _statement(fresh)
    statement["predicate"]["run"][field] = "not what run.json says"
    sign_statement(fresh, statement, keys.trusted)
    assert _failing(verify_bundle(fresh)) == {
        CheckName.RUN_STATUS: (
            Status.FAIL,
            f"run.json and the signed predicate differ on {field}",
            ["run.json"],
        )
    }
