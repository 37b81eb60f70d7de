"""Evidence files (`appliance.evidence.finding`): the published numbers exactly and the
schema's rules."""

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.core.errors import ConfigError
from appliance.core.validation import schema_problems
from appliance.evidence.finding import (
    find_finding,
    load_finding,
    load_findings,
    load_schema,
    validate_finding,
)
from tests.unit.evidence.test_compare import PUBLISHED, miniature_finding


def test_published_findings_carry_the_exact_numbers() -> None:
    findings = {f.id: f for f in load_findings() if f.raw["origin"] == "published"}
    assert set(findings) == set(PUBLISHED)
    for finding_id, metrics in PUBLISHED.items():
        raw = findings[finding_id].raw
        assert raw["origin"] == "published"
        assert {m["name"]: m["values"] for m in raw["metrics"]} == metrics


def test_published_scope() -> None:
    qwen35 = find_finding("qwen35-35b-a3b-8g-demand-mmap").raw
    assert qwen35["scope"]["model"]["sha256"] == (
        "6aec31ed654fbf12f9950c98bab0a09faea433ffdc4b3acfeb55a1f050e3e444"
    )
    assert qwen35["scope"]["model"]["bytes"] == 17821719168
    assert qwen35["scope"]["memory_limit_bytes"] == 8 * 1024**3
    assert qwen35["scope"]["n_predict"] == 128
    assert qwen35["byte_identity"]["claimed"] is True
    prefill = [c for c in qwen35["claims"] if c["metric"] == "prefill_tps"]
    assert prefill == [
        {
            "metric": "prefill_tps",
            "baseline": "baseline",
            "treatment": "demand-mmap",
            "direction": "lower",
            "ratio": None,
            "tolerance": 0,
        }
    ]
    assert find_finding("qwen3-30b-a3b-16-oversubscription-gate").scope["n_predict"] == 16
    cache = find_finding("gpu-hot-cpu-miss-expert-cache-rejected").raw
    assert cache["status"] == "rejected" and len(cache["rejected_because"]) == 2
    assert cache["byte_identity"]["claimed"] is False
    plan = find_finding("qwen35-122b-a10b-64g-5090d-plan").raw
    assert plan["status"] == "plan-unverified" and plan["claims"] == []
    assert plan["scope"]["hardware"]["ram_bytes"] == 64 * 1024**3


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: r.pop("scope"), "/scope: missing field"),
        (lambda r: r.update(extra=1), "/extra: unknown field"),
        (lambda r: r.update(bundle_digest=None), "a reproduction must name the bundle"),
        (lambda r: r.update(bundle_digest="xyz"), "does not match"),
        (lambda r: r["claims"][0].update(ratio=0.5), "disagrees with the metric values"),
        (lambda r: r["claims"][0].update(direction="higher"), "contradicts direction"),
        (lambda r: r["claims"][1].update(treatment="nope"), "variant 'nope' is not in variants"),
        (
            lambda r: r["scope"].update(n_predict=True),
            "/scope/n_predict: expected integer or null, got boolean",
        ),
        (lambda r: r.update(status="rejected"), "must say why"),
    ],
)
def test_invalid_findings_are_refused_with_the_field(edit: Any, message: str) -> None:
    raw = miniature_finding()
    edit(raw)
    errors = validate_finding(raw, load_schema())
    assert any(message in e for e in errors), errors


def test_finding_file_must_be_named_by_its_id(tmp_path: Path) -> None:
    (tmp_path / "other-name.json").write_text(json.dumps(miniature_finding()))
    with pytest.raises(ConfigError, match="must equal the file name"):
        load_finding(tmp_path / "other-name.json")


def test_schema_check_refuses_keywords_it_does_not_check() -> None:
    schema = load_schema()
    schema["definitions"]["claim"]["oneOf"] = [{"type": "object"}]
    assert schema_problems(schema) == ["/definitions/claim: keywords this project does not check: oneOf"]


def test_curves_need_two_numbers_per_point() -> None:
    raw = miniature_finding()
    raw["curves"] = [
        {
            "name": "replay",
            "x": "capacity (experts)",
            "y": "hit rate",
            "series": {"lru": [[8, 0.4], [16, 0.7, 1]]},
        }
    ]
    assert validate_finding(raw, load_schema()) == ["/curves/0/series/lru/1: allows at most 2 items"]
    raw["curves"][0]["series"]["lru"][1] = [16, 0.7]
    assert validate_finding(raw, load_schema()) == []
