"""The prefill findings' claims mean something (qwen35-shape-8g-prefill-cpu, qwen3-30b-shape-prefill-cpu):
a run whose prefill readers do not speed the prompt fails them, one whose decode keeps the prompt's
reads held fails the decode claim, a machine that is faster or slower in every variant alike holds them."""

from typing import Any

import pytest

from appliance.evidence.bundle_facts import BundleFacts
from appliance.evidence.compare import _check_claim
from appliance.evidence.finding import load_findings
from tests.conftest import REPO

FINDINGS = {f.raw["id"]: f.raw for f in load_findings(REPO / "evidence")}
PREFILL_FINDINGS = ("qwen35-shape-8g-prefill-cpu", "qwen3-30b-shape-prefill-cpu")
METRICS = ("prefill_tps", "decode_tps", "wall_s")
Figures = dict[str, dict[str, float]]


def measured(finding: str) -> Figures:
    """The medians of the finding's sweep, variant -> metric -> value."""
    metrics = FINDINGS[finding]["metrics"]
    return {v: {m["name"]: m["values"][v] for m in metrics} for v in ("demand-prefetch", "demand-prefill")}


def holds(finding: str, values: Figures) -> list[bool | None]:
    raw = FINDINGS[finding]
    claims: list[dict[str, Any]] = raw["claims"]
    assert [c["metric"] for c in claims] == list(METRICS)
    variants = {v: {m: {"median": x} for m, x in metrics.items()} for v, metrics in values.items()}
    facts = BundleFacts({}, {}, 8 << 30, 0, raw["scope"]["n_predict"], 3, [], {"variants": variants})
    return [_check_claim(facts, claim).holds for claim in claims]


def scaled(values: Figures, factor: float, variant: str | None = None) -> Figures:
    """Every figure of `variant` (None: of every variant) on a machine `factor` times as fast."""
    return {
        v: {
            "prefill_tps": m["prefill_tps"] * factor,
            "decode_tps": m["decode_tps"] * factor,
            "wall_s": m["wall_s"] / factor,
        }
        if variant in (None, v)
        else dict(m)
        for v, m in values.items()
    }


@pytest.mark.parametrize("finding", PREFILL_FINDINGS)
def test_the_measured_medians_hold_and_a_uniformly_faster_or_slower_machine_too(finding: str) -> None:
    values = measured(finding)
    assert holds(finding, values) == [True] * 3
    assert holds(finding, scaled(values, 3.0)) == [True] * 3
    assert holds(finding, scaled(values, 0.4)) == [True] * 3


@pytest.mark.parametrize("finding", PREFILL_FINDINGS)
@pytest.mark.parametrize("factor", [None, 0.6])  # readers that do nothing; readers 40% slower
def test_prefill_readers_that_lose_their_speed_fail(finding: str, factor: float | None) -> None:
    values = measured(finding)
    speedup = values["demand-prefill"]["prefill_tps"] / values["demand-prefetch"]["prefill_tps"]
    assert speedup > 3  # what the finding measured
    assert (
        holds(finding, scaled(values, 1 / speedup if factor is None else factor, "demand-prefill"))
        == [False] * 3
    )


@pytest.mark.parametrize("finding", PREFILL_FINDINGS)
def test_readers_that_keep_their_budget_held_into_decode_fail_the_decode_claim_only(finding: str) -> None:
    """The previous 0006 kept what the prompt read held: at the Qwen3.5 shape decode ran at
    0.64x prefetch's (bundle 8f38e837), every other figure as fast."""
    kept = {v: dict(m) for v, m in measured(finding).items()}
    kept["demand-prefill"]["decode_tps"] = 0.64 * kept["demand-prefetch"]["decode_tps"]
    assert holds(finding, kept) == [True, False, True]
