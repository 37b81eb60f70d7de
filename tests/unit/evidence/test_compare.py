"""Comparing a bundle with a finding (`appliance.evidence.compare`); the helpers the other
evidence tests share (a miniature finding, a sealed run, a trusted key)."""

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import KeyPair, init_keys
from appliance.attest.trust import trust_key
from appliance.attest.verify import Verdict
from appliance.core.errors import ApplianceError
from appliance.evidence.bundle_facts import claimed_evidence, verified_input
from appliance.evidence.compare import NOT_COMPARABLE, NOT_REPRODUCED, REPRODUCED, Comparison, compare
from appliance.evidence.draft import draft_finding
from appliance.evidence.finding import (
    Finding,
    find_finding,
    load_findings,
    load_schema,
    validate_finding,
)
from tests.conftest import run_cli
from tests.fake_run import MODEL, make_run, results

PUBLISHED = {
    "qwen35-35b-a3b-8g-demand-mmap": {
        "wall_s": {"baseline": 828.3091, "demand-mmap": 100.9432},
        "decode_tps": {"baseline": 0.1595, "demand-mmap": 1.8929},
    },
    "qwen3-30b-a3b-16-oversubscription-gate": {
        "wall_s": {"baseline": 90.096, "demand-mmap": 33.175},
        "decode_tps": {"baseline": 0.23, "demand-mmap": 1.99},
    },
    "gpu-hot-cpu-miss-expert-cache-rejected": {
        "hit_rate": {"gpu-hot-cache": 0.493},
        "decode_tps": {"cpu-moe": 20.795, "gpu-hot-cache": 17.305, "auto": 26.015},
    },
    "qwen35-122b-a10b-64g-5090d-plan": {},
}


def miniature_finding(**changes: Any) -> dict[str, Any]:
    """A reproduction finding scoped exactly like tests.fake_run's default run."""
    raw: dict[str, Any] = {
        "schema_version": 1,
        "id": "tiny-oversub-demand-mmap",
        "title": "tiny oversub",
        "origin": "reproduction",
        "status": "measured",
        "summary": "miniature demand mmap",
        "bundle_digest": "ab" * 32,
        "profile": "tiny-oversub",
        "scope": {
            "model": {
                "name": "tiny-moe",
                "quantization": None,
                "file": MODEL["file"],
                "bytes": MODEL["bytes"],
                "sha256": MODEL["sha256"],
            },
            "engine": {
                "name": "llama.cpp",
                "commit": None,
                "release": "b10229",
                "modification": "demand mmap",
            },
            "target": "cpu",
            "hardware": {"gpu": None, "gpu_memory_bytes": None, "ram_bytes": None},
            "memory_limit_bytes": 209715200,
            "swap_bytes": 0,
            "n_predict": 32,
            "repeats": 3,
            "statistic": "median",
            "controlled": ["cold page cache"],
            "not_controlled": [],
            "unknown": [],
        },
        "variants": {"baseline": "plain mmap", "demand-mmap": "demand mmap"},
        "metrics": [{"name": "wall_s", "unit": "s", "values": {"baseline": 40.0, "demand-mmap": 10.0}}],
        "claims": [
            {
                "metric": "wall_s",
                "baseline": "baseline",
                "treatment": "demand-mmap",
                "direction": "lower",
                "ratio": 0.25,
                "tolerance": 0.25,
            },
            {
                "metric": "decode_tps",
                "baseline": "baseline",
                "treatment": "demand-mmap",
                "direction": "higher",
                "ratio": 4.0,
                "tolerance": 0.25,
            },
            {
                "metric": "prefill_tps",
                "baseline": "baseline",
                "treatment": "demand-mmap",
                "direction": "lower",
                "ratio": None,
                "tolerance": 0,
            },
        ],
        "byte_identity": {"claimed": True, "between": ["baseline", "demand-mmap"], "scope": "matched length"},
    }
    for key, value in changes.items():
        raw[key] = value
    return raw


def as_finding(raw: dict[str, Any]) -> Finding:
    assert validate_finding(raw, load_schema()) == []
    return Finding(id=raw["id"], path=Path(f"{raw['id']}.json"), raw=raw)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return init_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def key(pair: KeyPair, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The signing key, trusted through a fresh APPLIANCE_TRUSTED_KEYS store."""
    monkeypatch.setenv("APPLIANCE_TRUSTED_KEYS", str(tmp_path_factory.mktemp("trusted")))
    trust_key(pair.public)
    return pair.private


def compared(run: Path, finding: Finding) -> Comparison:
    """compare after the full verification evidence runs first."""
    return compare(run, finding, verified_input(run))


def sealed_run(root: Path, key: Path, **kwargs: Any) -> Path:
    run = make_run(root, **kwargs)
    finalize_bundle(run, key)
    return run


def test_matching_run_reproduces(tmp_path: Path, key: Path) -> None:
    run = sealed_run(tmp_path, key)
    result = compared(run, as_finding(miniature_finding()))
    assert result.verdict == REPRODUCED, result
    assert [c.holds for c in result.claims] == [True, True, True, True]
    assert "observed ratio 0.25 vs claimed 0.25" in result.claims[0].reason


def test_ratio_outside_tolerance_is_not_reproduced(tmp_path: Path, key: Path) -> None:
    run = sealed_run(
        tmp_path,
        key,
        result=results(
            {"wall_s": 40.0, "decode_tps": 2.0, "prefill_tps": 50.0},
            {"wall_s": 30.0, "decode_tps": 8.0, "prefill_tps": 40.0},
        ),
    )
    result = compared(run, as_finding(miniature_finding()))
    assert result.verdict == NOT_REPRODUCED
    assert result.claims[0].holds is False
    assert "observed ratio 0.75 vs claimed 0.25 (+200.0%" in result.claims[0].reason


def test_wrong_direction_is_not_reproduced(tmp_path: Path, key: Path) -> None:
    run = sealed_run(
        tmp_path,
        key,
        result=results(
            {"wall_s": 40.0, "decode_tps": 2.0, "prefill_tps": 50.0},
            {"wall_s": 10.0, "decode_tps": 8.0, "prefill_tps": 60.0},
        ),
    )
    result = compared(run, as_finding(miniature_finding()))
    assert result.verdict == NOT_REPRODUCED
    assert "not lower than the baseline" in result.claims[2].reason


def test_lost_byte_identity_is_not_reproduced(tmp_path: Path, key: Path) -> None:
    run = sealed_run(
        tmp_path,
        key,
        result=results(
            {"wall_s": 40.0, "decode_tps": 2.0, "prefill_tps": 50.0},
            {"wall_s": 10.0, "decode_tps": 8.0, "prefill_tps": 40.0},
            identical=False,
        ),
    )
    result = compared(run, as_finding(miniature_finding()))
    assert result.verdict == NOT_REPRODUCED
    assert any("byte identity: outputs different, the evidence says identical" in r for r in result.reasons)


def test_another_model_file_is_not_comparable(tmp_path: Path, key: Path) -> None:
    run = sealed_run(tmp_path, key, model={**MODEL, "sha256": "cd" * 32})
    result = compared(run, as_finding(miniature_finding()))
    assert result.verdict == NOT_COMPARABLE
    assert result.reasons[0].startswith("another model file")


def test_another_gpu_is_not_comparable(tmp_path: Path, key: Path) -> None:
    raw = miniature_finding()
    raw["scope"]["hardware"]["gpu"] = "NVIDIA GeForce RTX 5090"
    result = compared(sealed_run(tmp_path, key), as_finding(raw))
    assert result.verdict == NOT_COMPARABLE
    assert "another GPU: the evidence was measured on NVIDIA GeForce RTX 5090" in result.reasons[0]


def test_another_memory_limit_is_not_comparable(tmp_path: Path, key: Path) -> None:
    run = sealed_run(tmp_path, key, memory_limit=512 * 1024**2)
    result = compared(run, as_finding(miniature_finding()))
    assert result.verdict == NOT_COMPARABLE
    assert "another memory_limit_bytes: the run used 536870912" in result.reasons[0]


def test_incomplete_or_tampered_bundle_is_not_comparable(tmp_path: Path, key: Path) -> None:
    incomplete = sealed_run(tmp_path / "a", key, status="incomplete")
    result = compared(incomplete, as_finding(miniature_finding()))
    assert result.verdict == NOT_COMPARABLE and "bundle is incomplete" in result.reasons[0]
    tampered = sealed_run(tmp_path / "b", key)
    (tampered / "results.json").write_text(
        json.dumps(
            results(
                {"wall_s": 40.0, "decode_tps": 2.0, "prefill_tps": 50.0},
                {"wall_s": 10.0, "decode_tps": 8.0, "prefill_tps": 40.0},
            )
        )
        + " "
    )
    with pytest.raises(ApplianceError, match="bundle tampered: failed file-digests") as caught:
        verified_input(tampered, allow_untrusted=True)
    assert caught.value.exit_code == Verdict.TAMPERED.exit_code


def test_untrusted_or_unsigned_input_is_refused_unless_allowed(
    tmp_path: Path, key: Path, pair: KeyPair
) -> None:
    stranger = init_keys(tmp_path / "stranger")
    for run in (sealed_run(tmp_path / "u", stranger.private), sealed_run(tmp_path / "n", None)):
        with pytest.raises(ApplianceError, match="--allow-untrusted") as caught:
            verified_input(run)
        assert caught.value.exit_code in (Verdict.UNTRUSTED.exit_code, Verdict.UNSIGNED.exit_code)
        result = compare(run, as_finding(miniature_finding()), verified_input(run, allow_untrusted=True))
        assert result.verdict == REPRODUCED and result.untrusted_input
        assert result.as_dict()["input"] == "untrusted input"
        raw = draft_finding(run, "x", "t", "s", allow_untrusted=True)
        assert raw["title"] == "[untrusted input] t" and raw["summary"] == "[untrusted input] s"
        assert raw["scope"]["not_controlled"][0].startswith("untrusted input: signature: ")


def test_plan_and_foreign_published_evidence_are_not_comparable(tmp_path: Path, key: Path) -> None:
    run = sealed_run(tmp_path, key)
    plan = compared(run, find_finding("qwen35-122b-a10b-64g-5090d-plan"))
    assert plan.verdict == NOT_COMPARABLE and "plan" in plan.reasons[0]
    qwen = compared(run, find_finding("qwen35-35b-a3b-8g-demand-mmap"))
    assert qwen.verdict == NOT_COMPARABLE and qwen.reasons[0].startswith("another model file")


def test_missing_metric_is_not_comparable(tmp_path: Path, key: Path) -> None:
    raw = copy.deepcopy(miniature_finding())
    raw["variants"]["auto"] = "automatic placement"
    raw["claims"].append(
        {
            "metric": "decode_tps",
            "baseline": "baseline",
            "treatment": "auto",
            "direction": "higher",
            "ratio": None,
            "tolerance": 0,
        }
    )
    result = compared(sealed_run(tmp_path, key), as_finding(raw))
    assert result.verdict == NOT_COMPARABLE
    assert "no median decode_tps for 'baseline' and 'auto'" in result.reasons[-1]


def test_claimed_evidence_comes_from_the_profile(tmp_path: Path) -> None:
    assert claimed_evidence(make_run(tmp_path)) == ["tiny-oversub-demand-mmap"]


def test_cli_list_show_and_compare(tmp_path: Path, key: Path) -> None:
    listed = run_cli("evidence", "list", "--json", check=True)
    assert {e["id"] for e in json.loads(listed.stdout)} == {f.id for f in load_findings()}
    assert set(PUBLISHED) <= {f.id for f in load_findings()}
    shown = run_cli("evidence", "show", "qwen35-35b-a3b-8g-demand-mmap", check=True)
    assert "wall_s (s): baseline 828.3091, demand-mmap 100.9432" in shown.stdout
    missing = run_cli("evidence", "show", "nope")
    assert missing.returncode == 2 and "no evidence 'nope'" in missing.stderr
    run = sealed_run(tmp_path, key)
    env = {"APPLIANCE_TRUSTED_KEYS": os.environ["APPLIANCE_TRUSTED_KEYS"]}
    result = run_cli(
        "evidence", "compare", str(run), "--evidence", "qwen35-35b-a3b-8g-demand-mmap", "--json", env=env
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report[0]["verdict"] == NOT_COMPARABLE and report[0]["input"] == "verified input"
    assert "1 of 1 not reproduced or not comparable" in result.stderr


def test_cli_compare_on_a_bundle_resigned_by_an_untrusted_key(tmp_path: Path, key: Path) -> None:
    run = sealed_run(tmp_path / "run", key)
    finalize_bundle(run, init_keys(tmp_path / "stranger").private)
    env = {"APPLIANCE_TRUSTED_KEYS": os.environ["APPLIANCE_TRUSTED_KEYS"]}
    refused = run_cli("evidence", "compare", str(run), env=env)
    assert refused.returncode == Verdict.UNTRUSTED.exit_code and refused.stdout == ""
    assert "bundle untrusted: signature: valid signature by key" in refused.stderr
    allowed = run_cli(
        "evidence",
        "compare",
        str(run),
        "--allow-untrusted",
        "--evidence",
        "tiny-oversub-miniature-calibrated",
        env=env,
    )
    assert allowed.returncode == 1  # compared: the fake run's model is not the evidence's
    lines = allowed.stdout.splitlines()
    assert lines == [
        "[untrusted input] tiny-oversub-miniature-calibrated: NOT COMPARABLE",
        "[untrusted input]   why: another model file: the run used "
        "'tiny-oversub-qwen3moe.gguf' (sha256 3b1d2e5c4a69), the evidence "
        "tiny-oversub-qwen3moe (sha256 6ef96b978890)",
    ]
    assert allowed.stderr.startswith("error: [untrusted input] 1 of 1 not reproduced")
    as_json = run_cli(
        "evidence",
        "compare",
        str(run),
        "--allow-untrusted",
        "--json",
        "--evidence",
        "tiny-oversub-miniature-calibrated",
        env=env,
    )
    report = json.loads(as_json.stdout)
    assert [(r["input"], r["untrusted_input"]) for r in report] == [("untrusted input", True)]


def test_run_without_recorded_limit_is_not_comparable(tmp_path: Path, key: Path) -> None:
    run = make_run(tmp_path)
    record = json.loads((run / "run.json").read_text())
    del record["limits"]
    (run / "run.json").write_text(json.dumps(record))
    (run / "inputs" / "profile.yaml").write_text("name: tiny-oversub\n")
    finalize_bundle(run, key)
    result = compared(run, as_finding(miniature_finding()))
    assert result.verdict == NOT_COMPARABLE
    assert result.reasons == [
        "the run does not record memory_limit_bytes (the evidence used 209715200)",
        "the run does not record swap_bytes (the evidence used 0)",
    ]
