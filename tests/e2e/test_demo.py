"""`make demo` and `make repro-cpu` end to end: the real engine image, the synthesized tiny
model at twice the memory limit, cold-cache trials, sealed bundles, evidence verdicts."""

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.verify import Verdict, verify_bundle
from appliance.core.checks import Status
from tests.conftest import run_cli
from tests.e2e.conftest import DemoRun, make, user_env

LIMIT = 200 * 2**20


def trials(run: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(run.glob("trials/*/trial.json"))]


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_make_demo_runs_the_miniature_experiment(demo_run: DemoRun) -> None:
    run, result, tmp_path = demo_run.run, demo_run.result, demo_run.home
    assert "STAND-IN" in result.stdout  # GitHub is unreachable here: the fallback is said loudly
    assert json.loads((run / "run.json").read_text())["status"] == "complete"

    records = trials(run)
    assert {t["variant"] for t in records} == {"baseline", "demand-mmap", "demand-prefetch"}
    assert len(records) == 9
    for trial in records:
        assert trial["status"] == "ok", trial
        assert trial["residency_at_start"]["resident_pages"] == 0  # cold: evicted first
        assert trial["cgroup"]["peak_bytes"] <= LIMIT
        assert trial["container"]["mem_limit"] == trial["container"]["memswap_limit"] == LIMIT
        assert trial["container"]["network_mode"] == "none"

    paging = json.loads((run / "analysis" / "paging.json").read_text())["lru_prediction"]
    assert len(paging) == 9
    for row in paging:
        # a cold start cannot read less than the distinct experts the trace touched
        touched = row["distinct_experts"] * row["expert_bytes"]
        assert row["measured_read_bytes"] >= touched, row
        if row["variant"] != "baseline":
            assert 0.9 < row["ratio"] < 3.0, row  # demand paging reads about what LRU predicts

    results = json.loads((run / "results.json").read_text())
    assert results["byte_identity"]["all_identical"] is True

    # no key existed: the demo made one, said where, and trusts it on this machine only
    keys = tmp_path / "config" / "appliance" / "keys"
    assert f"private key {keys / 'appliance-ed25519.key'}" in result.stdout
    keyid = json.loads((keys / "appliance-ed25519.pub.json").read_text())["keyid"]
    assert [p.name for p in (tmp_path / "trusted-keys").iterdir()] == [f"{keyid}.pub.json"]
    assert "bundle verification: verdict: VERIFIED" in result.stdout
    verified = run_cli("bundle", "verify", str(run), env=user_env(tmp_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.splitlines()[-1] == (
        f"verdict: VERIFIED: every check passed; signed by trusted key {keyid}")
    elsewhere = run_cli("bundle", "verify", str(run),
                        env={**user_env(tmp_path), "APPLIANCE_TRUSTED_KEYS": str(tmp_path)})
    assert elsewhere.returncode == Verdict.UNTRUSTED.exit_code


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_make_repro_cpu_signs_verifies_and_gives_a_verdict(engine_image_cpu: str,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "repro"
    result = make("repro-cpu", tmp_path, f"REPRO_ARGS=--out {out} --repeats 1")
    assert "comparison with evidence/" in result.stdout, result.stdout[-4000:] + result.stderr
    assert "tiny-oversub-miniature" in result.stdout
    run = out / "tiny-oversub"
    public_key = tmp_path / "config" / "appliance" / "keys" / "appliance-ed25519.pub.json"
    verification = verify_bundle(run, public_key)
    assert verification.verdict is Verdict.VERIFIED
    assert {c.name: c.status for c in verification.checks}["signature"] is Status.PASS
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "reproduced" in result.stdout
