"""Acceptance for bundle verification on a bundle from a real cpu-engine run (the session's
`make demo`, tests/e2e/conftest.py): the tamper battery through `appliance bundle verify`
(sealing key trusted, no --key), the independent verifier, and `evidence compare` on a
bundle re-signed by a key nobody trusts."""

import json
import shutil
from pathlib import Path

import pytest

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import init_keys
from appliance.attest.verify import Verdict
from tests.conftest import run_cli
from tests.e2e.conftest import DemoRun
from tests.independent import run_independent_verifier
from tests.tamper import Keys, another_genuine_bundle, cases, snapshot

CASE_NAMES = [case.name for case in cases(Path("other"))]


@pytest.fixture(scope="session")
def real_keys(demo_run: DemoRun, tmp_path_factory: pytest.TempPathFactory) -> Keys:
    """The key `make demo` made and trusted, and a stranger's."""
    stranger = init_keys(tmp_path_factory.mktemp("stranger") / "keys")
    return Keys(trusted=demo_run.key, untrusted=stranger)


@pytest.fixture(scope="session")
def store(demo_run: DemoRun) -> dict[str, str]:
    """The demo user's environment: a trust store holding only the demo's key."""
    return demo_run.env


@pytest.fixture(scope="session")
def real_bundle(demo_run: DemoRun) -> Path:
    """The genuine bundle of the session's `make demo` on the cpu engine image."""
    assert json.loads((demo_run.run / "run.json").read_text())["status"] == "complete"
    return demo_run.run


@pytest.fixture(scope="session")
def other_bundle(real_bundle: Path, real_keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return another_genuine_bundle(real_bundle, tmp_path_factory.mktemp("other"), real_keys)


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_real_bundle_verifies_here_and_independently(
    real_bundle: Path, real_keys: Keys, store: dict[str, str]
) -> None:
    verified = run_cli("bundle", "verify", str(real_bundle), "--json", env=store)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["verdict"] == Verdict.VERIFIED.label
    assert report["signer"] == real_keys.trusted.keyid
    independent = run_independent_verifier(real_bundle, real_keys.trusted.public)
    assert independent.returncode == 0, independent.stdout + independent.stderr
    assert independent.stdout == f"accepted {real_keys.trusted.keyid}\n"


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize("name", CASE_NAMES)
def test_real_bundle_tamper_battery(
    name: str, real_bundle: Path, other_bundle: Path, real_keys: Keys, store: dict[str, str], tmp_path: Path
) -> None:
    case = next(c for c in cases(other_bundle) if c.name == name)
    bundle = tmp_path / "bundle"
    shutil.copytree(real_bundle, bundle, symlinks=True)
    case.tamper(bundle, real_keys)
    before = snapshot(bundle)
    result = run_cli("bundle", "verify", str(bundle), env=store)
    assert snapshot(bundle) == before
    assert result.returncode == case.verdict.exit_code != 0, result.stdout + result.stderr
    verdict_line = result.stdout.splitlines()[-1]
    assert verdict_line.startswith(f"verdict: {case.verdict.label.upper()}: ")
    assert case.check in verdict_line
    assert len(result.stderr.splitlines()) == 1 and case.check in result.stderr
    assert run_independent_verifier(bundle, real_keys.trusted.public).returncode == 1


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_evidence_compare_refuses_an_untrusted_resign(
    real_bundle: Path, real_keys: Keys, store: dict[str, str], tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(real_bundle, bundle, symlinks=True)
    finalize_bundle(bundle, real_keys.untrusted.private)
    refused = run_cli("evidence", "compare", str(bundle), env=store)
    assert refused.returncode == Verdict.UNTRUSTED.exit_code and refused.stdout == ""
    assert real_keys.untrusted.keyid in refused.stderr
    allowed = run_cli("evidence", "compare", str(bundle), "--allow-untrusted", env=store)
    lines = allowed.stdout.splitlines()
    assert lines[0].startswith("[untrusted input] tiny-oversub-sweep-calibrated: ")
    assert all(line.startswith("[untrusted input] ") for line in lines)
    as_json = run_cli("evidence", "compare", str(bundle), "--allow-untrusted", "--json", env=store)
    assert [r["input"] for r in json.loads(as_json.stdout)] == ["untrusted input"]
    assert run_cli("evidence", "compare", str(real_bundle), env=store).stdout.startswith(
        "tiny-oversub-sweep-calibrated: "
    )
