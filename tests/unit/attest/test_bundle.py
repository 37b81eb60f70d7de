"""Sealing: what a bundle's statement and manifest hold, and what cannot be sealed."""

import base64
import json
import os
from pathlib import Path

import pytest

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import load_public_key
from appliance.core.errors import ConfigError, IntegrityError
from appliance.runs.run_dir import ATTESTATION_FILE, MANIFEST_FILE
from tests.conftest import run_cli
from tests.fake_run import make_run
from tests.tamper import Keys


@pytest.fixture
def signed(tmp_path: Path, keys: Keys) -> Path:
    run = make_run(tmp_path)
    finalize_bundle(run, keys.trusted.private)
    return run


def test_statement_subjects_are_every_file_but_the_seals(signed: Path) -> None:
    envelope = json.loads((signed / ATTESTATION_FILE).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    names = [s["name"] for s in statement["subject"]]
    on_disk = {p.relative_to(signed).as_posix() for p in signed.rglob("*") if p.is_file()}
    assert names == sorted(on_disk - {MANIFEST_FILE, ATTESTATION_FILE})
    assert "provenance.json" in names
    assert "trials/000-baseline-r1/trace.moetrace" in names
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert len(envelope["signatures"]) == 1


def test_signed_predicate_carries_provenance_json(signed: Path) -> None:
    envelope = json.loads((signed / ATTESTATION_FILE).read_text())
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    assert predicate["provenance"] == json.loads((signed / "provenance.json").read_text())
    assert predicate["run"]["status"] == "complete"


def test_manifest_names_the_signer_by_recomputed_key_id(signed: Path, keys: Keys) -> None:
    manifest = json.loads((signed / MANIFEST_FILE).read_text())
    assert manifest["attestation"]["signed"] is True
    assert manifest["attestation"]["public_key"]["keyid"] == keys.trusted.keyid
    assert load_public_key(keys.trusted.public).keyid == keys.trusted.keyid
    sizes = {rel: e["bytes"] for rel, e in manifest["files"].items()}
    assert sizes["run.json"] == (signed / "run.json").stat().st_size


@pytest.mark.parametrize("make", ["symlink", "fifo"])
def test_non_regular_files_cannot_be_sealed(tmp_path: Path, keys: Keys, make: str) -> None:
    run = make_run(tmp_path)
    odd = run / "trials" / "odd"
    if make == "symlink":
        odd.symlink_to(run / "run.json")
    else:
        os.mkfifo(odd)
    kind = "symbolic link" if make == "symlink" else "FIFO"
    with pytest.raises(IntegrityError, match=f"trials/odd \\({kind}\\)"):
        finalize_bundle(run, keys.trusted.private)
    assert not (run / MANIFEST_FILE).exists() and not (run / ATTESTATION_FILE).exists()


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


@pytest.mark.parametrize(
    "name, content",
    [("provenance.json", b"{"), ("run.json", b"\xff"), ("run.json", b"[1]"), ("manifest.json", b"[")],
)
def test_malformed_inputs_to_sealing_are_one_line_refusals(
    tmp_path: Path, keys: Keys, name: str, content: bytes
) -> None:
    run = make_run(tmp_path)
    finalize_bundle(run, keys.trusted.private)
    (run / name).write_bytes(content)
    result = run_cli("bundle", "sign", str(run), "--key", str(keys.trusted.private), "--force")
    if name == "manifest.json":  # an unreadable old manifest is simply replaced
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert name in result.stderr and "Traceback" not in result.stderr
