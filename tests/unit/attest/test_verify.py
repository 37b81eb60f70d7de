"""Verification fails closed: the tamper battery on fake-run bundles, verdicts, exit codes."""

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from appliance.attest.bundle import finalize_bundle
from appliance.attest.verify import CheckName, Verdict, Verification, _reject_name, _same_json, verify_bundle
from appliance.core.checks import Check, Status
from appliance.core.errors import ConfigError
from appliance.runs.run_dir import ATTESTATION_FILE, MANIFEST_FILE
from tests.conftest import run_cli
from tests.fake_run import make_run
from tests.tamper import Keys, another_genuine_bundle, cases, check_named, sign_statement, snapshot

CASE_NAMES = [case.name for case in cases(Path("other"))]


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory, genuine: Path, keys: Keys) -> Path:
    return another_genuine_bundle(genuine, tmp_path_factory.mktemp("other"), keys)


@pytest.fixture
def fresh(tmp_path: Path, genuine: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(genuine, copy, symlinks=True)
    return copy


def test_genuine_bundle_verifies_through_the_trust_store(
    genuine: Path, keys: Keys, trust_store: Path
) -> None:
    result = verify_bundle(genuine)
    assert result.verdict is Verdict.VERIFIED and result.exit_code == 0
    assert all(c.status is Status.PASS for c in result.checks)
    assert result.signer == keys.trusted.keyid
    assert result.summary() == (
        f"verdict: VERIFIED: every check passed; signed by trusted key {keys.trusted.keyid}"
    )
    manifest = json.loads((genuine / MANIFEST_FILE).read_text())
    assert result.bundle_digest == manifest["bundle_digest"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_tamper_battery(name: str, fresh: Path, other: Path, keys: Keys, trust_store: Path) -> None:
    case = next(c for c in cases(other) if c.name == name)
    case.tamper(fresh, keys)
    before = snapshot(fresh)
    result = verify_bundle(fresh)
    assert snapshot(fresh) == before  # verification modifies nothing
    assert result.verdict is case.verdict, result.summary()
    assert not result.accepted and result.exit_code == case.verdict.exit_code != 0
    summary = result.summary()
    assert "\n" not in summary and case.check in summary, summary
    failing = {c.name for c in result.checks if c.status is Status.FAIL}
    assert case.check in failing


def test_untrusted_resign_names_the_real_signer_not_the_claimed_id(
    fresh: Path, other: Path, keys: Keys, trust_store: Path
) -> None:
    claiming = next(c for c in cases(other) if c.name == "resealed-untrusted-with-trusted-id")
    claiming.tamper(fresh, keys)
    result = verify_bundle(fresh)
    assert result.signer == keys.untrusted.keyid
    assert keys.untrusted.keyid in result.summary()
    assert keys.trusted.keyid not in result.summary()
    assert "appliance keys trust" in result.summary()


def test_allow_flags_accept_and_say_so(fresh: Path, keys: Keys, trust_store: Path) -> None:
    finalize_bundle(fresh, keys.untrusted.private)
    refused = verify_bundle(fresh)
    allowed = verify_bundle(fresh, allow_untrusted=True)
    assert refused.exit_code == Verdict.UNTRUSTED.exit_code
    assert allowed.verdict is Verdict.UNTRUSTED and allowed.accepted and allowed.exit_code == 0
    assert allowed.untrusted_input
    assert allowed.summary().startswith("verdict: UNTRUSTED, accepted by --allow-untrusted: ")
    assert {c.name: c.status for c in allowed.checks}[CheckName.SIGNATURE] is Status.WARN
    assert not verify_bundle(fresh, allow_unsigned=True).accepted

    finalize_bundle(fresh)
    assert verify_bundle(fresh).verdict is Verdict.UNSIGNED
    unsigned = verify_bundle(fresh, allow_unsigned=True)
    assert unsigned.accepted and "accepted by --allow-unsigned" in unsigned.summary()
    assert not verify_bundle(fresh, allow_untrusted=True).accepted


def test_key_option_trusts_only_that_key(fresh: Path, keys: Keys, trust_store: Path) -> None:
    assert verify_bundle(fresh, keys.untrusted.public).verdict is Verdict.UNTRUSTED
    assert verify_bundle(fresh, keys.trusted.public).verdict is Verdict.VERIFIED


def test_incomplete_run_is_its_own_verdict(tmp_path: Path, keys: Keys, trust_store: Path) -> None:
    run = make_run(tmp_path, status="incomplete")
    finalize_bundle(run, keys.trusted.private)
    result = verify_bundle(run)
    assert result.verdict is Verdict.INCOMPLETE and result.exit_code == 6
    assert result.summary() == (
        "verdict: INCOMPLETE: run-status: the run is incomplete: its results are partial and "
        "cannot be evidence; rerun the profile"
    )
    [check] = [c for c in result.checks if c.status is not Status.PASS]
    assert (check.name, check.status, check.files) == (CheckName.RUN_STATUS, Status.FAIL, ["run.json"])
    assert check.reason == "run is incomplete: this bundle records a run that did not complete"
    assert not verify_bundle(run, allow_untrusted=True, allow_unsigned=True).accepted


def test_untrusted_signature_outranks_incomplete(tmp_path: Path, keys: Keys, trust_store: Path) -> None:
    run = make_run(tmp_path, status="incomplete")
    finalize_bundle(run, keys.untrusted.private)
    assert verify_bundle(run).verdict is Verdict.UNTRUSTED
    allowed = verify_bundle(run, allow_untrusted=True)
    assert allowed.verdict is Verdict.INCOMPLETE and not allowed.accepted


@pytest.mark.parametrize(
    "name",
    ["/etc/passwd", "../outside", "a/../results.json", "./results.json", "trials//x", "", "manifest.json"],
)
def test_subject_names_that_are_not_plain_relative_paths(
    fresh: Path, keys: Keys, trust_store: Path, name: str
) -> None:
    envelope = json.loads((fresh / ATTESTATION_FILE).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"].append({"name": name, "digest": {"sha256": "0" * 64}})
    sign_statement(fresh, statement, keys.trusted)
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    reason = {c.name: c for c in result.checks}[CheckName.SUBJECT_NAMES].reason
    assert repr(name) in reason


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b"[]",
        b"null",
        b"\xff\xfe",
        b"[" * 100000,
        b'{"payload": 1, "payloadType": [], "signatures": {}}',
        b'{"payload": "!!", "payloadType": "application/vnd.in-toto+json", "signatures": []}',
    ],
)
@pytest.mark.parametrize("seal", [MANIFEST_FILE, ATTESTATION_FILE])
def test_malformed_seals_are_refusals_not_tracebacks(
    fresh: Path, trust_store: Path, seal: str, content: bytes
) -> None:
    (fresh / seal).write_bytes(content)
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    assert {c.name: c.status for c in result.checks}[seal.split(".")[0]] is Status.FAIL


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        verify_bundle(tmp_path / "missing")


def test_cli_verify_exit_codes_and_json(fresh: Path, keys: Keys, trust_store: Path) -> None:
    env = {"APPLIANCE_TRUSTED_KEYS": str(trust_store)}
    verified = run_cli("bundle", "verify", str(fresh), env=env)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines()[-1].startswith("verdict: VERIFIED: ")

    finalize_bundle(fresh, keys.untrusted.private)
    untrusted = run_cli("bundle", "verify", str(fresh), "--json", env=env)
    assert untrusted.returncode == 4
    report = json.loads(untrusted.stdout)
    assert report["verdict"] == Verdict.UNTRUSTED.label and report["accepted"] is False
    assert report["signer"] == keys.untrusted.keyid
    assert f"bundle untrusted: signature: valid signature by key {keys.untrusted.keyid}" in untrusted.stderr
    allowed = run_cli("bundle", "verify", str(fresh), "--allow-untrusted", env=env)
    assert allowed.returncode == 0
    assert "accepted by --allow-untrusted" in allowed.stdout

    finalize_bundle(fresh)
    assert run_cli("bundle", "verify", str(fresh), env=env).returncode == 5
    (fresh / "results.json").write_text("{}")
    tampered = run_cli("bundle", "verify", str(fresh), "--allow-unsigned", env=env)
    assert tampered.returncode == 3
    assert "bundle tampered: failed file-digests" in tampered.stderr


def test_cli_help_documents_every_exit_code() -> None:
    text = run_cli("bundle", "verify", "--help", check=True).stdout
    for verdict in Verdict:
        assert f"{verdict.exit_code}  {verdict.label}" in text
    assert "--allow-untrusted" in text and "--allow-unsigned" in text


def _paths(value: object, prefix: tuple[object, ...] = (), depth: int = 3) -> list[tuple]:
    """Every path into a JSON value down to depth, the value itself included."""
    found: list[tuple] = [prefix]
    if depth == 0:
        return found
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key), depth - 1)
    elif isinstance(value, list):
        for index, item in enumerate(value[:2]):
            found += _paths(item, (*prefix, index), depth - 1)
    return found


def _replace(value: object, path: tuple, new: object) -> object:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return copy


SHAPES = ([], {}, "x", 7, None)


# The manifest's only field that may change without a refusal: free text saying which tool
# wrote it. (The key id beside the public key must be that key's: see below.)
MANIFEST_HINTS = {("created_by",): (str,)}


def test_any_field_of_the_manifest_in_another_shape_is_a_refusal(fresh: Path, trust_store: Path) -> None:
    manifest = json.loads((fresh / MANIFEST_FILE).read_text())
    verdicts: dict[Verdict, int] = {}
    for path in _paths(manifest):
        for shape in SHAPES:
            (fresh / MANIFEST_FILE).write_text(json.dumps(_replace(manifest, path, shape)))
            result = verify_bundle(fresh)  # never raises
            hint = isinstance(shape, MANIFEST_HINTS.get(path, ()))
            expected = Verdict.VERIFIED if hint else Verdict.TAMPERED
            assert result.verdict is expected, (path, shape, result.summary())
            verdicts[result.verdict] = verdicts.get(result.verdict, 0) + 1
    assert verdicts[Verdict.VERIFIED] == 1  # created_by "x"


@pytest.mark.parametrize(
    "where", [(), ("attestation",), ("attestation", "public_key"), ("files", "run.json")], ids=str
)
def test_a_manifest_with_a_field_the_sealer_never_writes_is_tampered(
    fresh: Path, trust_store: Path, where: tuple[str, ...]
) -> None:
    manifest = json.loads((fresh / MANIFEST_FILE).read_text())
    target = manifest
    for key in where:
        target = target[key]
    target["note"] = "added after sealing"
    (fresh / MANIFEST_FILE).write_text(json.dumps(manifest))
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    assert check_named(result, CheckName.MANIFEST).reason.startswith(
        f"{MANIFEST_FILE} is not a version 1 manifest (exactly "
    )


def test_a_manifest_naming_another_signer_is_tampered(fresh: Path, keys: Keys, trust_store: Path) -> None:
    """A trusted key signed, but the manifest records another key (or none) as the signer."""
    manifest = json.loads((fresh / MANIFEST_FILE).read_text())
    other = json.loads(keys.untrusted.public.read_text())
    for attestation in (
        {"public_key": other},
        {"public_key": None},
        {"signed": False},
        {"public_key": {**manifest["attestation"]["public_key"], "keyid": other["keyid"]}},
    ):
        edited = json.loads(json.dumps(manifest))
        edited["attestation"].update(attestation)
        (fresh / MANIFEST_FILE).write_text(json.dumps(edited))
        result = verify_bundle(fresh)
        assert result.verdict is Verdict.TAMPERED, attestation
        assert [c.name for c in result.checks if c.status is Status.FAIL] == [CheckName.SIGNATURE]
        assert check_named(result, CheckName.SIGNATURE).files == [MANIFEST_FILE]
        assert check_named(result, CheckName.SIGNATURE).reason == (
            f"valid ed25519 signature by {keys.trusted.keyid}, but {MANIFEST_FILE} does not record "
            "that key as the signer (attestation.signed, attestation.public_key)"
        )


def test_any_field_of_a_signed_statement_in_another_shape_is_a_refusal(
    fresh: Path, keys: Keys, trust_store: Path
) -> None:
    envelope = json.loads((fresh / ATTESTATION_FILE).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    for path in _paths(statement, depth=4):
        for shape in SHAPES:
            if _replace(statement, path, shape) == statement:
                continue
            sign_statement(fresh, _replace(statement, path, shape), keys.trusted)
            result = verify_bundle(fresh)
            assert result.verdict is Verdict.TAMPERED, (path, shape, result.summary())


def test_a_subject_named_like_the_derived_report_is_refused(
    fresh: Path, keys: Keys, trust_store: Path
) -> None:
    """report.html is never sealed: a statement that lists it (with the file present, so the
    file walk agrees) is refused by name."""
    (fresh / "report.html").write_text("<!DOCTYPE html>")
    envelope = json.loads((fresh / ATTESTATION_FILE).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    digest = hashlib.sha256(b"<!DOCTYPE html>").hexdigest()
    statement["subject"].append({"name": "report.html", "digest": {"sha256": digest}})
    sign_statement(fresh, statement, keys.trusted)
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    index = len(statement["subject"]) - 1
    assert {c.name: c for c in result.checks}[CheckName.SUBJECT_NAMES].reason == (
        f"subject {index} 'report.html': names a derived file, which is never sealed"
    )


def test_a_report_html_beside_a_sealed_bundle_is_not_one_of_its_files(
    fresh: Path, keys: Keys, trust_store: Path
) -> None:
    (fresh / "report.html").write_text("<!DOCTYPE html>")
    assert verify_bundle(fresh).verdict is Verdict.VERIFIED
    finalize_bundle(fresh, keys.trusted.private)  # sealed again with it present: still left out
    assert "report.html" not in json.loads((fresh / MANIFEST_FILE).read_text())["files"]
    assert verify_bundle(fresh).verdict is Verdict.VERIFIED
    (fresh / "trials" / "report.html").write_text("<!DOCTYPE html>")  # only at the top
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    assert {c.name: c for c in result.checks}[
        CheckName.SUBJECTS_COVER_FILES
    ].reason == "added: trials/report.html"


def test_as_json_is_the_report_bundle_verify_json_prints() -> None:
    check = Check(
        CheckName.SIGNATURE, Status.WARN, "valid signature by another key", ["attestation.dsse.json"]
    )
    verification = Verification(
        [check],
        Verdict.UNTRUSTED,
        frozenset({Verdict.UNTRUSTED, Verdict.UNSIGNED}),
        signer="ab" * 32,
        bundle_digest="cd" * 32,
        run_status="complete",
        advice="contents verified, origin not",
    )
    assert verification.as_json() == {
        "verdict": "untrusted",
        "accepted": True,
        "exit_code": 0,
        "untrusted_input": True,
        "allowed": ["--allow-unsigned", "--allow-untrusted"],
        "signer": "ab" * 32,
        "bundle_digest": "cd" * 32,
        "summary": "verdict: UNTRUSTED, accepted by --allow-untrusted: contents verified, origin not",
        "checks": [
            {
                "name": "signature",
                "status": "warn",
                "reason": "valid signature by another key",
                "files": ["attestation.dsse.json"],
                "fix": "",
            }
        ],
    }


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


def test_same_json_compares_canonical_forms_and_is_false_when_there_is_none() -> None:
    assert _same_json({"a": 1, "b": [2, 3]}, {"b": [2, 3], "a": 1})
    assert not _same_json({"a": 1}, {"a": 2})
    assert not _same_json("\ud800", "\ud800")  # a lone surrogate has no UTF-8 form
    assert not _same_json({1j: 1}, {1j: 1})  # not JSON at all
    deep = _nested(100_000)
    assert not _same_json(deep, deep)  # too deep to write out


@pytest.mark.parametrize(
    ("name", "why"),
    [
        (5, "not a non-empty string"),
        ("", "not a non-empty string"),
        ("/etc/passwd", "absolute or not a POSIX path"),
        ("trials\\x", "absolute or not a POSIX path"),
        ("a\0b", "absolute or not a POSIX path"),
        ("a/../b", "contains '..'"),
        ("..", "contains '..'"),
        ("./results.json", "not normalised"),
        ("trials//x", "not normalised"),
        ("trials/", "not normalised"),
        ("manifest.json", "names a sealing file"),
        ("attestation.dsse.json", "names a sealing file"),
        ("report.html", "names a derived file, which is never sealed"),
    ],
)
def test_a_subject_name_that_is_not_a_plain_relative_path_says_why(name: object, why: str) -> None:
    assert _reject_name(name) == why


@pytest.mark.parametrize("name", ["results.json", "trials/x/y", "...", ".hidden", "a..b", "a b/-"])
def test_any_plain_relative_name_is_a_subject_name(name: str) -> None:
    assert _reject_name(name) is None


@pytest.mark.parametrize("attestation", [[], "attestation.dsse.json", 7, None])
def test_a_manifest_whose_attestation_is_not_an_object_is_refused(
    fresh: Path, trust_store: Path, attestation: object
) -> None:
    manifest = json.loads((fresh / MANIFEST_FILE).read_text())
    manifest["attestation"] = attestation
    (fresh / MANIFEST_FILE).write_text(json.dumps(manifest))
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    assert check_named(result, CheckName.MANIFEST).reason == (
        "manifest.json is not a version 1 manifest (exactly manifest_version, created_by, "
        "run_status, bundle_digest, files, attestation; attestation naming attestation.dsse.json)"
    )


def test_a_seal_that_is_not_utf8_is_named_without_its_path(fresh: Path, trust_store: Path) -> None:
    (fresh / MANIFEST_FILE).write_bytes(b'{"a": "\xff"}')
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    assert check_named(result, CheckName.MANIFEST).reason == (
        "manifest.json is not strict JSON (line 1: not UTF-8 (byte 0xff at offset 7))"
    )
