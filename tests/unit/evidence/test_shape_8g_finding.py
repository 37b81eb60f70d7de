"""Finding qwen35-shape-8g-cpu (the published experiment's shape on this machine's CPU) claims
only directions it measured beyond noise, each of them able to fail: a run where a treatment
loses its direction fails that claim and no other; a machine uniformly faster or slower holds
them all; and it is compared with the published finding by ratio, scoped as another device."""

from typing import Any

import pytest

from appliance.evidence.bundle_facts import BundleFacts
from appliance.evidence.compare import _check_claim
from appliance.evidence.finding import load_findings
from tests.conftest import REPO

FINDINGS = {f.raw["id"]: f.raw for f in load_findings(REPO / "evidence")}
FINDING = FINDINGS["qwen35-shape-8g-cpu"]
PUBLISHED = FINDINGS["qwen35-35b-a3b-8g-demand-mmap"]
Figures = dict[str, dict[str, float]]
SPEEDS = ("decode_tps", "prefill_tps")  # higher is faster; wall_s: lower is faster


def measured() -> Figures:
    """The finding's medians, variant -> metric -> value."""
    variants = list(FINDING["variants"])
    return {v: {m["name"]: m["values"][v] for m in FINDING["metrics"]} for v in variants}


def label(claim: dict[str, Any]) -> str:
    return f"{claim['metric']} {claim['treatment']}"


def holds(values: Figures) -> dict[str, bool | None]:
    variants = {v: {m: {"median": x} for m, x in metrics.items()} for v, metrics in values.items()}
    facts = BundleFacts({}, {}, 8 << 30, 0, FINDING["scope"]["n_predict"], 3, [], {"variants": variants})
    return {label(c): _check_claim(facts, c).holds for c in FINDING["claims"]}


def scaled(values: Figures, factor: float) -> Figures:
    """Every figure on a machine `factor` times as fast."""
    return {
        v: {m: x * factor if m in SPEEDS else x / factor for m, x in metrics.items()}
        for v, metrics in values.items()
    }


def test_the_medians_hold_and_a_uniformly_faster_or_slower_machine_too() -> None:
    values = measured()
    assert FINDING["claims"], "a finding with no claim cannot fail"
    for factor in (1.0, 3.0, 0.4):
        assert set(holds(scaled(values, factor)).values()) == {True}, factor


@pytest.mark.parametrize("claim", FINDING["claims"], ids=label)
def test_a_treatment_that_loses_its_direction_fails_that_claim_only(claim: dict[str, Any]) -> None:
    values = measured()
    treatment, metric = claim["treatment"], claim["metric"]
    observed = values[treatment][metric] / values[claim["baseline"]][metric]
    assert abs(observed - 1) > 0.2, "a direction within 20% is noise here and is not claimed"
    flipped = {v: dict(m) for v, m in values.items()}
    flipped[treatment][metric] = values[claim["baseline"]][metric] / observed  # the ratio inverted
    expected = {label(c): label(c) != label(claim) for c in FINDING["claims"]}
    assert holds(flipped) == expected


def test_it_names_the_published_finding_and_its_scope_differs_from_it() -> None:
    notes = " ".join(FINDING["notes"])
    assert PUBLISHED["id"] in notes
    assert FINDING["scope"]["target"] == "cpu" and FINDING["scope"]["hardware"]["gpu"] is None
    assert FINDING["scope"]["memory_limit_bytes"] == PUBLISHED["scope"]["memory_limit_bytes"]
    assert any("read-ahead" in item and "128 KiB" in item for item in FINDING["scope"]["controlled"])
