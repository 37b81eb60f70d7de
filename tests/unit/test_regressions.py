"""Every input under tests/regressions/ once crashed its reader; now each is refused with the
project's own one-line error, naming the file, and nothing is changed."""

import re
import shutil
from pathlib import Path

import pytest

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import init_keys
from appliance.attest.verify import Verdict, verify_bundle
from appliance.core.errors import ApplianceError, ConfigError
from appliance.engine.lock import load_lock
from appliance.runs.profile import load_profile
from appliance.runs.run_dir import ATTESTATION_FILE, MANIFEST_FILE
from tests.conftest import REPO
from tests.fake_run import make_run

REGRESSIONS = REPO / "tests" / "regressions"


def _inputs(folder: str) -> list[Path]:
    return sorted((REGRESSIONS / folder).iterdir())


# The one-line error each input gets (after "<file>: "), or for a bundle the first check that
# fails and its reason: the named refusal, not any refusal.
REFUSALS = {
    "lock/integer-5000-digits.json": "line 1: a number with more than 100 digits",
    "lock/nested-5000.json": "line 1: nested deeper than 64 levels",
    "lock/non-utf8.json": "line 1: not UTF-8 (byte 0xff at offset 35)",
    "profile/control-character.yaml": "not valid YAML at line 2: control characters are not allowed",
    "profile/nested-5000.yaml": "not valid YAML at line 1: exceeded maximum nesting depth",
    "profile/non-utf8.yaml": "line 2: not UTF-8 (byte 0xff at offset 28)",
    "bundle/attestation-integer-5000-digits.json": (
        "attestation",
        "attestation.dsse.json is not strict JSON (line 1: a number with more than 100 digits)",
    ),
    "bundle/attestation-nested-5000.json": (
        "attestation",
        "attestation.dsse.json is not strict JSON (line 1: nested deeper than 64 levels)",
    ),
    "bundle/attestation-payload-a-number.json": (
        "attestation",
        "attestation payload is not a base64 string",
    ),
    "bundle/manifest-a-list.json": (
        "manifest",
        "manifest.json is not a version 1 manifest (exactly manifest_version, created_by, "
        "run_status, bundle_digest, files, attestation; attestation naming attestation.dsse.json)",
    ),
    "bundle/manifest-file-named-newline.json": (
        "attestation-digest",
        "attestation file differs from the sha256 in the manifest (statement or signature changed "
        "after sealing)",
    ),
    "bundle/manifest-files-entry-a-number.json": (
        "manifest",
        "manifest.json is not a version 1 manifest (exactly manifest_version, created_by, "
        "run_status, bundle_digest, files, attestation; attestation naming attestation.dsse.json)",
    ),
}


def test_every_regression_input_has_its_named_refusal() -> None:
    assert sorted(REFUSALS) == sorted(
        f"{folder}/{p.name}" for folder in ("lock", "profile", "bundle") for p in _inputs(folder)
    )


def _one_line(exc: ApplianceError, path: Path, original: Path) -> None:
    assert str(exc) == f"{path}: {REFUSALS[f'{original.parent.name}/{original.name}']}"


@pytest.mark.parametrize("path", _inputs("lock"), ids=lambda p: p.name)
def test_lock_regressions_are_refused(path: Path, tmp_path: Path) -> None:
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    with pytest.raises(ConfigError, match=f"^{re.escape(str(copy))}: ") as info:
        load_lock(copy)
    _one_line(info.value, copy, path)
    assert copy.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("path", _inputs("profile"), ids=lambda p: p.name)
def test_profile_regressions_are_refused(path: Path, tmp_path: Path) -> None:
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    with pytest.raises(ConfigError, match=f"^{re.escape(str(copy))}: ") as info:
        load_profile(str(copy))
    _one_line(info.value, copy, path)


@pytest.fixture(scope="module")
def signed_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("bundle")
    keys = init_keys(root / "keys")
    run = make_run(root)
    finalize_bundle(run, keys.private)
    assert verify_bundle(run, keys.public).verdict is Verdict.VERIFIED
    return run, keys.public


@pytest.mark.parametrize("path", _inputs("bundle"), ids=lambda p: p.name)
def test_bundle_regressions_fail_verification(
    path: Path, signed_bundle: tuple[Path, Path], tmp_path: Path
) -> None:
    original, public = signed_bundle
    run = tmp_path / "run"
    shutil.copytree(original, run)
    target = MANIFEST_FILE if path.name.startswith("manifest-") else ATTESTATION_FILE
    shutil.copy(path, run / target)
    result = verify_bundle(run, public)
    assert result.verdict is Verdict.TAMPERED
    first = next(c for c in result.checks if not c.ok)
    assert (first.name, first.reason) == REFUSALS[f"bundle/{path.name}"], result.summary()
    assert all("\n" not in c.reason for c in result.checks)


# A bundle sealed by main at cc52605 (before the run directory's layout moved into
# appliance.runs.run_dir), signed by a throw-away test key whose public half lies beside it:
# every later version must still verify it. Built from tests/fake_run.py's run with the route
# traces left out (release-check refuses committed traces).
SEALED_BEFORE = REGRESSIONS / "sealed-cc52605"


def test_a_bundle_sealed_by_the_previous_main_still_verifies(tmp_path: Path) -> None:
    run = tmp_path / "bundle"
    shutil.copytree(SEALED_BEFORE / "bundle", run)
    result = verify_bundle(run, SEALED_BEFORE / "signer.pub.json")
    assert result.verdict is Verdict.VERIFIED, result.summary()
    assert result.exit_code == 0
    (run / "results.json").write_text("{}\n")
    assert verify_bundle(run, SEALED_BEFORE / "signer.pub.json").verdict is Verdict.TAMPERED
