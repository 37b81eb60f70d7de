"""Bundle finalize/verify: every tamper case fails and names what changed."""

import base64
import json
from pathlib import Path

import pytest

from appliance.attest.bundle import (
    ATTESTATION_FILE,
    MANIFEST_FILE,
    Check,
    finalize_bundle,
    verdict,
    verify_bundle,
)
from appliance.attest.dsse import init_keys
from appliance.core.errors import ConfigError
from tests.fake_run import make_run


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("keys")
    mine = init_keys(root / "mine")
    other = init_keys(root / "other")
    return {"private": mine.private, "public": mine.public,
            "other_private": other.private, "other_public": other.public}


@pytest.fixture
def signed(tmp_path: Path, keys: dict[str, Path]) -> Path:
    run = make_run(tmp_path)
    finalize_bundle(run, keys["private"])
    return run


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def failing(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks if c.status == "fail"}


def test_signed_bundle_verifies_with_its_key(signed: Path, keys: dict[str, Path]) -> None:
    checks = verify_bundle(signed, keys["public"])
    assert failing(checks) == {}
    assert verdict(checks) == "verified"
    names = [c.name for c in checks]
    assert names == ["manifest", "attestation", "attestation-digest", "signature", "plain-files",
                     "subjects-cover-files", "file-digests", "manifest-matches-statement",
                     "bundle-digest", "run-status"]
    assert all(c.status == "pass" for c in checks)


def test_statement_subjects_are_every_file_but_the_seals(signed: Path) -> None:
    envelope = json.loads((signed / ATTESTATION_FILE).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    names = {s["name"] for s in statement["subject"]}
    on_disk = {p.relative_to(signed).as_posix() for p in signed.rglob("*") if p.is_file()}
    assert names == on_disk - {MANIFEST_FILE, ATTESTATION_FILE}
    assert "provenance.json" in names
    assert "trials/000-baseline-r1/trace.moetrace" in names
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert len(envelope["signatures"]) == 1


def test_without_key_the_embedded_key_is_used_and_said(signed: Path) -> None:
    checks = by_name(verify_bundle(signed))
    assert checks["signature"].status == "warn"
    assert "--key" in checks["signature"].reason
    assert verdict(list(checks.values())) == "verified"


@pytest.mark.parametrize("rel", ["run.json", "inputs/lock.json", "results.json",
                                 "trials/003-demand-mmap-r2/output.txt",
                                 "trials/000-baseline-r1/trace.moetrace", "plots/decode_tps.png",
                                 "provenance.json"])
def test_one_byte_changed_in_any_file_fails_naming_it(signed: Path, keys: dict[str, Path],
                                                      rel: str) -> None:
    path = signed / rel
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    checks = verify_bundle(signed, keys["public"])
    bad = failing(checks)
    assert bad["file-digests"].files == [rel]
    assert rel in bad["file-digests"].reason
    assert verdict(checks) == "failed"


def test_added_file_fails_naming_it(signed: Path, keys: dict[str, Path]) -> None:
    (signed / "trials" / "000-baseline-r1" / "extra.txt").write_text("sneaked in\n")
    bad = failing(verify_bundle(signed, keys["public"]))
    assert bad["subjects-cover-files"].files == ["trials/000-baseline-r1/extra.txt"]
    assert "added: trials/000-baseline-r1/extra.txt" in bad["subjects-cover-files"].reason


def test_removed_file_fails_naming_it(signed: Path, keys: dict[str, Path]) -> None:
    (signed / "inputs" / "schedule.json").unlink()
    bad = failing(verify_bundle(signed, keys["public"]))
    assert bad["subjects-cover-files"].reason == "removed: inputs/schedule.json"


def test_symlink_in_bundle_fails(signed: Path, keys: dict[str, Path]) -> None:
    (signed / "plots" / "link.png").symlink_to(signed / "plots" / "decode_tps.png")
    bad = failing(verify_bundle(signed, keys["public"]))
    assert bad["plain-files"].files == ["plots/link.png"]


def _rewrite_statement(run: Path) -> None:
    path = run / ATTESTATION_FILE
    envelope = json.loads(path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["run"]["profile"] = "something-else"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    path.write_text(json.dumps(envelope))


def test_edited_statement_fails_signature_and_seal(signed: Path, keys: dict[str, Path]) -> None:
    _rewrite_statement(signed)
    bad = failing(verify_bundle(signed, keys["public"]))
    assert "does not match the statement" in bad["signature"].reason
    assert bad["attestation-digest"].files == [ATTESTATION_FILE]


def test_edited_statement_fails_even_with_embedded_key(signed: Path) -> None:
    _rewrite_statement(signed)
    bad = failing(verify_bundle(signed))
    assert "signature" in bad


def test_signature_from_another_key_fails_naming_both(tmp_path: Path,
                                                     keys: dict[str, Path]) -> None:
    run = make_run(tmp_path)
    finalize_bundle(run, keys["other_private"])
    other_id = json.loads(keys["other_public"].read_text())["keyid"]
    mine_id = json.loads(keys["public"].read_text())["keyid"]
    checks = verify_bundle(run, keys["public"])
    bad = failing(checks)
    assert other_id in bad["signature"].reason and mine_id in bad["signature"].reason
    assert verdict(checks) == "failed"


def test_resigned_by_attacker_after_edit_fails_with_owner_key(signed: Path,
                                                              keys: dict[str, Path]) -> None:
    (signed / "results.json").write_text('{"variants": {}}')
    finalize_bundle(signed, keys["other_private"])
    assert failing(verify_bundle(signed)) == {}
    bad = failing(verify_bundle(signed, keys["public"]))
    assert list(bad) == ["signature"]


def test_incomplete_run_verifies_as_incomplete(tmp_path: Path, keys: dict[str, Path]) -> None:
    run = make_run(tmp_path, status="incomplete")
    finalize_bundle(run, keys["private"])
    checks = verify_bundle(run, keys["public"])
    bad = failing(checks)
    assert list(bad) == ["run-status"]
    assert "run is incomplete" in bad["run-status"].reason
    assert verdict(checks) == "incomplete"


def test_incomplete_run_relabelled_complete_fails(tmp_path: Path, keys: dict[str, Path]) -> None:
    run = make_run(tmp_path, status="incomplete")
    finalize_bundle(run, keys["private"])
    record = json.loads((run / "run.json").read_text())
    record["status"] = "complete"
    (run / "run.json").write_text(json.dumps(record))
    checks = verify_bundle(run, keys["public"])
    bad = failing(checks)
    assert bad["file-digests"].files == ["run.json"]
    assert "'complete'" in bad["run-status"].reason and "'incomplete'" in bad["run-status"].reason
    assert verdict(checks) == "failed"


def test_unsigned_bundle_says_so_and_fails_when_key_required(tmp_path: Path,
                                                             keys: dict[str, Path]) -> None:
    run = make_run(tmp_path)
    finalize_bundle(run)
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    assert manifest["attestation"]["signed"] is False
    checks = by_name(verify_bundle(run))
    assert checks["signature"].status == "warn"
    assert "unsigned" in checks["signature"].reason
    assert verdict(list(checks.values())) == "verified"
    bad = failing(verify_bundle(run, keys["public"]))
    assert "unsigned" in bad["signature"].reason


def test_stripped_signature_fails(signed: Path) -> None:
    path = signed / ATTESTATION_FILE
    envelope = json.loads(path.read_text())
    envelope["signatures"] = []
    path.write_text(json.dumps(envelope))
    bad = failing(verify_bundle(signed))
    assert "signature removed" in bad["signature"].reason


def test_missing_manifest_and_attestation(signed: Path) -> None:
    (signed / MANIFEST_FILE).unlink()
    (signed / ATTESTATION_FILE).unlink()
    bad = failing(verify_bundle(signed))
    assert "never finalized" in bad["manifest"].reason
    assert "missing" in bad["attestation"].reason


def test_finalize_refuses_a_directory_without_run_record(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a run directory"):
        finalize_bundle(tmp_path)


def test_provenance_is_sanitized(signed: Path) -> None:
    text = (signed / "provenance.json").read_text()
    assert str(Path.home()) + "/" not in text
    assert str(signed) not in text
    record = json.loads(text)
    assert record["engine"]["source"] == "stand-in b10229"
    assert record["run"]["image_id"] == "sha256:" + "5a" * 32
    assert record["model"]["sha256"].startswith("3b1d2e5c")
    assert record["host"]["cgroup_version"] in (1, 2)


def test_edited_manifest_fails(signed: Path, keys: dict[str, Path]) -> None:
    path = signed / MANIFEST_FILE
    manifest = json.loads(path.read_text())
    manifest["files"]["results.json"]["sha256"] = "0" * 64
    path.write_text(json.dumps(manifest))
    bad = failing(verify_bundle(signed, keys["public"]))
    assert list(bad) == ["manifest-matches-statement"]
    assert bad["manifest-matches-statement"].files == ["results.json"]
