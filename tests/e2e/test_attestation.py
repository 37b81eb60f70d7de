"""Acceptance for bundle verification on a bundle from a real cpu-engine run: the tamper
battery through `appliance bundle verify` (sealing key trusted, no --key), the independent
verifier, and `evidence compare` on a bundle re-signed by a key nobody trusts."""

import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import init_keys
from appliance.attest.trust import trust_key
from appliance.attest.verify import Verdict
from appliance.core.paths import cache_dir
from appliance.runs.profile import load_profile
from appliance.workflows.pipeline import ensure_synth_model
from tests.conftest import run_cli
from tests.independent import run_independent_verifier
from tests.tamper import Keys, another_genuine_bundle, cases, snapshot

CASE_NAMES = [case.name for case in cases(Path("other"))]
PROFILE = "tiny-oversub"


@pytest.fixture(scope="session")
def real_keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    root = tmp_path_factory.mktemp("real-keys")
    return Keys(trusted=init_keys(root / "trusted"), untrusted=init_keys(root / "untrusted"))


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory, real_keys: Keys) -> dict[str, str]:
    """Environment for the CLI: a trust store holding only the sealing key."""
    directory = tmp_path_factory.mktemp("trusted-keys")
    trust_key(real_keys.trusted.public, directory)
    return {"APPLIANCE_TRUSTED_KEYS": str(directory)}


@pytest.fixture(scope="session")
def real_bundle(engine_image_cpu: str, real_keys: Keys,
                tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One genuine bundle per session: the demo profile, one repeat, on the cpu image."""
    models = cache_dir() / "models" / "demo"
    ensure_synth_model(load_profile(PROFILE), models, Console(quiet=True))
    out = tmp_path_factory.mktemp("real-run") / "bundle"
    result = run_cli("run", PROFILE, "--models", str(models), "--repeats", "1", "--image",
                     engine_image_cpu, "--key", str(real_keys.trusted.private.parent),
                     "--out", str(out), timeout=2400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    return out


@pytest.fixture(scope="session")
def other_bundle(real_bundle: Path, real_keys: Keys,
                 tmp_path_factory: pytest.TempPathFactory) -> Path:
    return another_genuine_bundle(real_bundle, tmp_path_factory.mktemp("other"), real_keys)


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_real_bundle_verifies_here_and_independently(real_bundle: Path, real_keys: Keys,
                                                     store: dict[str, str]) -> None:
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
def test_real_bundle_tamper_battery(name: str, real_bundle: Path, other_bundle: Path,
                                    real_keys: Keys, store: dict[str, str],
                                    tmp_path: Path) -> None:
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
def test_evidence_compare_refuses_an_untrusted_resign(real_bundle: Path, real_keys: Keys,
                                                      store: dict[str, str],
                                                      tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(real_bundle, bundle, symlinks=True)
    finalize_bundle(bundle, real_keys.untrusted.private)
    refused = run_cli("evidence", "compare", str(bundle), env=store)
    assert refused.returncode == Verdict.UNTRUSTED.exit_code and refused.stdout == ""
    assert real_keys.untrusted.keyid in refused.stderr
    allowed = run_cli("evidence", "compare", str(bundle), "--allow-untrusted", env=store)
    lines = allowed.stdout.splitlines()
    assert lines[0].startswith("[untrusted input] tiny-oversub-miniature: ")
    assert all(line.startswith("[untrusted input] ") for line in lines)
    as_json = run_cli("evidence", "compare", str(bundle), "--allow-untrusted", "--json",
                      env=store)
    assert [r["input"] for r in json.loads(as_json.stdout)] == ["untrusted input"]
    assert run_cli("evidence", "compare", str(real_bundle), env=store).stdout.startswith(
        "tiny-oversub-miniature: ")
