"""Finding qwen35-shape-8g-prefill-cpu's claims mean something: a run whose prefill readers do not
speed the prompt fails them, a machine that is faster or slower in every variant alike holds them."""

from typing import Any

import pytest

from appliance.evidence.bundle_facts import BundleFacts
from appliance.evidence.compare import _check_claim
from appliance.evidence.finding import load_findings
from tests.conftest import REPO

FINDING = next(f for f in load_findings(REPO / "evidence") if f.raw["id"] == "qwen35-shape-8g-prefill-cpu")
MEASURED = {  # medians of the finding's sweep, variant -> metric -> value
    v: {m["name"]: m["values"][v] for m in FINDING.raw["metrics"] if m["name"] in ("prefill_tps", "wall_s")}
    for v in ("demand-prefetch", "demand-prefill")
}


def facts(values: dict[str, dict[str, float]]) -> BundleFacts:
    variants = {v: {m: {"median": x} for m, x in metrics.items()} for v, metrics in values.items()}
    return BundleFacts({}, {}, 8 << 30, 0, 32, 3, [], {"variants": variants})


def holds(values: dict[str, dict[str, float]]) -> list[bool | None]:
    claims: list[dict[str, Any]] = FINDING.raw["claims"]
    assert {c["metric"] for c in claims} == {"prefill_tps", "wall_s"}
    return [_check_claim(facts(values), claim).holds for claim in claims]


def scaled(factor: float, variant: str | None = None) -> dict[str, dict[str, float]]:
    """Every figure of `variant` (None: of every variant) on a machine `factor` times as fast."""
    return {
        v: {"prefill_tps": m["prefill_tps"] * factor, "wall_s": m["wall_s"] / factor}
        if variant in (None, v)
        else dict(m)
        for v, m in MEASURED.items()
    }


def test_the_measured_medians_hold_and_a_uniformly_faster_or_slower_machine_too() -> None:
    assert holds(MEASURED) == [True, True]
    assert holds(scaled(3.0)) == [True, True] and holds(scaled(0.4)) == [True, True]


@pytest.mark.parametrize("factor", [None, 0.6])  # readers that do nothing; readers 40% slower
def test_prefill_readers_that_lose_their_speed_fail(factor: float | None) -> None:
    speedup = MEASURED["demand-prefill"]["prefill_tps"] / MEASURED["demand-prefetch"]["prefill_tps"]
    assert speedup > 3  # what the finding measured
    assert holds(scaled(1 / speedup if factor is None else factor, "demand-prefill")) == [False, False]
