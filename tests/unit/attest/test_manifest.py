"""manifest.json as `Manifest`: the manifest main sealed reads and writes back byte for byte,
the verifier's exact key sets are the classes' fields, a manifest of another shape is refused."""

import json
from pathlib import Path

import jsonschema
import pytest

from appliance.attest import verify
from appliance.attest.bundle import finalize_bundle, sealed_digests_match
from appliance.attest.manifest import MANIFEST_VERSION, AttestationEntry, FileEntry, Manifest
from appliance.core.errors import ConfigError
from appliance.core.validation import schema_problems
from tests.conftest import REPO
from tests.fake_run import make_run

OLD_MANIFEST = REPO / "tests" / "fixtures" / "sealed-main-daca34b" / "bundle" / "manifest.json"


def _dumped(manifest: Manifest) -> str:
    return json.dumps(manifest.to_json(), indent=2, sort_keys=False) + "\n"


def test_the_manifest_main_sealed_reads_and_writes_back_byte_for_byte() -> None:
    text = OLD_MANIFEST.read_text()
    manifest = Manifest.from_json(json.loads(text), str(OLD_MANIFEST))
    assert _dumped(manifest) == text
    assert manifest.manifest_version == MANIFEST_VERSION == 1
    assert manifest.files["run.json"] == FileEntry(
        "677a27bb8f990b2c6cecfd6b8aea92aa27a95082242e5cc9d19801b605610ad3", 1438
    )
    assert len(manifest.files) == 22
    assert manifest.attestation.signed is True and manifest.attestation.file == "attestation.dsse.json"
    jsonschema.Draft7Validator(Manifest.json_schema()).validate(json.loads(text))
    assert schema_problems(Manifest.json_schema()) == []


def test_the_sealer_writes_the_class_and_the_verifier_demands_its_keys(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    finalize_bundle(run)
    text = (run / "manifest.json").read_text()
    manifest = Manifest.from_json(json.loads(text), "manifest.json")
    assert _dumped(manifest) == text
    assert manifest.attestation == AttestationEntry(
        "attestation.dsse.json", manifest.attestation.sha256, False, None
    )
    assert '"public_key": null' in text
    assert verify.MANIFEST_FIELDS == (
        "manifest_version",
        "created_by",
        "run_status",
        "bundle_digest",
        "files",
        "attestation",
    )
    assert {"file", "sha256", "signed", "public_key"} == verify.ATTESTATION_FIELDS
    assert {"sha256", "bytes"} == verify.FILE_ENTRY_FIELDS
    assert sealed_digests_match(run) == []
    (run / "run.json").write_text("{}")
    assert sealed_digests_match(run) == ["run.json"]


def test_a_manifest_of_another_shape_is_refused_by_key(tmp_path: Path) -> None:
    data = json.loads(OLD_MANIFEST.read_text())
    with pytest.raises(ConfigError, match=r"^m.json: files\['run.json'\]: missing key 'bytes'$"):
        Manifest.from_json({**data, "files": {"run.json": {"sha256": "ab"}}}, "m.json")
    with pytest.raises(ConfigError, match=r"^m.json: attestation: missing key 'public_key'$"):
        Manifest.from_json({**data, "attestation": {"file": "a", "sha256": "b", "signed": False}}, "m.json")
    run = make_run(tmp_path)
    finalize_bundle(run)
    (run / "manifest.json").write_text(json.dumps({**data, "comment": "x"}))
    assert sealed_digests_match(run) == []  # not a manifest this sealer wrote: nothing to compare
