"""The reference plans (`appliance.planner.reference_plans`): rewritten from their evidence
inputs byte for byte, and what the committed ones say."""

import json
from pathlib import Path

import pytest

from appliance.planner.reference_plans import write_reference_plans
from tests.conftest import REPO

PLANS = REPO / "evidence" / "plans"


def reference_inputs() -> list[Path]:
    return sorted(PLANS.glob("*.input.json"))


@pytest.mark.parametrize("input_path", reference_inputs(), ids=lambda p: p.name)
def test_reference_plans_reproduce_from_evidence_inputs(input_path: Path, tmp_path: Path) -> None:
    written = write_reference_plans(input_path, tmp_path, tmp_path / "skeletons")
    assert written
    for path in written:
        committed = PLANS / path.name
        assert committed.exists(), f"{committed.name} not committed: run make reference-plans"
        assert path.read_bytes() == committed.read_bytes(), path.name
        assert path.read_text().startswith(("UNVERIFIED", '{\n  "accounting"'))
    for path in written:
        if path.suffix == ".json":
            doc = json.loads(path.read_text())
            assert doc["label"].startswith("UNVERIFIED")
            groups = doc["plan"]["groups"]
            assert sum(groups.values()) == doc["tensor_data_bytes"]
            assert "/" not in doc["plan"]["model"]  # no host paths in evidence


def test_qwen35_122b_reference_prints_verdict_and_roofline() -> None:
    text = (PLANS / "qwen35-122b-a10b.64gib-rtx5090d-32gb.plan.txt").read_text()
    assert "verdict: fits in RAM plus VRAM" in text
    assert "--n-cpu-moe" in text
    assert "decode roofline" in text and "every expert byte read:" in text
    doc = json.loads((PLANS / "qwen35-122b-a10b.64gib-rtx5090d-32gb.plan.json").read_text())
    assert doc["plan"]["limits"]["ram_bytes"] == 64 << 30
    assert doc["plan"]["limits"]["vram_bytes"] == 32 << 30
    assert doc["plan"]["vram_total"] <= 32 << 30


def test_qwen35_35b_reference_is_close_to_the_published_file_size() -> None:
    doc = json.loads((PLANS / "qwen35-35b-a3b-ud-iq4_nl.8gib-cpu-only.plan.json").read_text())
    assert doc["known_file_size"] == 17_821_719_168
    assert 0 <= doc["size_vs_known"] < 0.01  # the assumed recipe errs slightly large
    assert doc["plan"]["verdict"] == "oversubscribed"
    assert doc["plan"]["env"] == {"LLAMA_MMAP_DEMAND": "1"}
