"""Claims that mean something (issue 52): a finding's sweep claims fail when the run regresses and
hold when only the disk is faster or slower; none can hold whatever the run does.

The sweeps here follow one model of an I/O-bound decode: each variant reads a fixed number of
bytes per token at each limit (what its policy and the routes decide, whatever the disk) at a fixed
share of the disk probe's bandwidth at the queue depth it reads at. A faster disk multiplies every
bandwidth, the probe's with them, by the same factor; a regression reads more, or slower.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.evidence.compare import NOT_REPRODUCED, REPRODUCED
from appliance.evidence.finding import load_findings, validate_finding
from appliance.evidence.sweep_claims import check_claim, claim_label, draft_sweep, empty_claim
from tests.conftest import REPO
from tests.fake_run import results
from tests.unit.evidence.test_compare import as_finding, compared, key, miniature_finding, pair, sealed_run

__all__ = ["key", "pair"]  # the fixtures test_compare shares

MIB = 1 << 20
LIMITS = [101257216, 202514432, 486039552]  # the demo's sweep
PROBE_MIB_S = {1: 480.0, 8: 1100.0}  # expert-size reads at queue depth 1 and 8 (make demo's disk)
LRU = (3.2, 2.0, 0.4)  # LRU's replayed decode MiB per token at each limit
BELADY = (1.76, 1.2, 0.3)
CAPACITY_SHARE = (0.6, 0.4, 0.0)
# variant -> (decode MiB per token at each limit, queue depth it reads at, share of that depth's
# probe it reads at); demand-prefetch reads deeper than QD1 and beats that probe (the 1.287)
VARIANTS: dict[str, tuple[tuple[float, ...], int, float]] = {
    "baseline": ((40.0, 30.0, 0.5), 1, 0.9),
    "demand-mmap": ((4.1, 2.2, 0.4), 1, 0.1),
    "demand-prefetch": ((4.1, 2.2, 0.4), 8, 0.6),
    "expert-lru": ((3.25, 2.0, 0.41), 8, 0.7),
}
CACHE = {"expert-lru": "lru"}  # the expert-cache variants and the policy each replays


def sweep(
    disk: float = 1.0,
    deep: float = 1.0,
    reads: dict[str, float] | None = None,
    pace: dict[str, float] | None = None,
) -> dict[str, Any]:
    """results.json `sweep` of the model above: `disk` multiplies every bandwidth and the probe's,
    `deep` those at queue depth 8 once more (a disk that gains more or less from depth); `reads`
    multiplies a variant's bytes read, `pace` its bandwidth (a regression)."""
    reads, pace = reads or {}, pace or {}
    probe = {depth: mib * MIB * disk * (deep if depth > 1 else 1.0) for depth, mib in PROBE_MIB_S.items()}
    summary, tps = [], {}
    for index, limit in enumerate(LIMITS):
        for variant, (per_token, depth, share) in VARIANTS.items():
            measured = per_token[index] * reads.get(variant, 1.0) * MIB
            bandwidth = share * pace.get(variant, 1.0) * probe[depth]
            tps[variant, limit] = bandwidth / measured
            summary.append(
                {
                    "memory_limit": limit,
                    "variant": variant,
                    "n": 3,
                    "decode_tps": tps[variant, limit],
                    "measured_over_lru": measured / (LRU[index] * MIB),
                    "measured_over_belady": measured / (BELADY[index] * MIB),
                    "belady_over_lru": BELADY[index] / LRU[index],
                    "disk_probe_depth": depth,
                    "disk_fraction": bandwidth / probe[depth],
                    "capacity_miss_share_lru": CAPACITY_SHARE[index],
                }
            )
    by_key = {(r["variant"], r["memory_limit"]): r for r in summary}
    cache = [
        {
            "memory_limit": limit,
            "variant": variant,
            "n": 3,
            "measured_over_replay": by_key[variant, limit]["measured_over_lru"],  # its replay is LRU's
            "reads_over_demand_mmap": by_key[variant, limit]["measured_over_lru"]
            / by_key["demand-mmap", limit]["measured_over_lru"],
            "decode_over_demand_prefetch": tps[variant, limit] / tps["demand-prefetch", limit],
        }
        for limit in LIMITS
        for variant in CACHE
    ]
    return {
        "limits": LIMITS,
        "probe": {"expert_qd1_bytes_per_s": probe[1], "expert_qd8_bytes_per_s": probe[8]},
        "summary": summary,
        "expert_cache": {"summary": cache},
    }


def sweep_finding() -> dict[str, Any]:
    """A new finding drafted, as `evidence draft` does, from the model's sweep on make demo's
    disk, scoped like tests.fake_run's run."""
    drafted = draft_sweep(sweep(), "baseline", 0.25)
    raw = miniature_finding(
        id="tiny-sweep-meaningful",
        variants={name: name for name in VARIANTS},
        metrics=[],
        claims=[],
        byte_identity={"claimed": None, "between": [], "scope": "not examined"},
        sweep=drafted,
    )
    raw["scope"]["memory_limit_bytes"] = None  # a sweep of several limits
    return raw


def _run(tmp_path: Path, key: Path, figures: dict[str, Any]) -> Path:
    plain = results(
        {"wall_s": 40.0, "decode_tps": 2.0, "prefill_tps": 50.0},
        {"wall_s": 10.0, "decode_tps": 8.0, "prefill_tps": 40.0},
    )
    return sealed_run(tmp_path, key, result=plain | {"sweep": figures})


def test_a_drafted_finding_claims_only_what_can_fail() -> None:
    raw = sweep_finding()
    assert validate_finding(raw) == []
    claims = raw["sweep"]["claims"]
    quantities = {(c["quantity"], c["variant"]) for c in claims}
    assert ("measured_over_lru", "demand-prefetch") in quantities
    assert ("measured_over_replay", "expert-lru") in quantities
    assert ("decode_over_demand_prefetch", "expert-lru") in quantities
    assert not [c for c in claims if c["quantity"] == "disk_fraction"]
    assert all(empty_claim(c) is None for c in claims)


@pytest.mark.parametrize(
    ("disk", "deep"), [(0.1, 1.0), (0.25, 1.0), (4.0, 1.0), (10.0, 1.0), (1.0, 0.5), (1.0, 3.0)]
)
def test_a_faster_or_slower_disk_alone_reproduces_the_finding(
    tmp_path: Path, key: Path, disk: float, deep: float
) -> None:
    figures = sweep(disk=disk, deep=deep)
    # the disk fraction is the same at every speed, each variant over the probe at its own depth;
    # demand prefetch reads faster than the QD1 probe (as make demo's did): no claim depends on it
    prefetch = [r for r in figures["summary"] if r["variant"] == "demand-prefetch"]
    assert all(r["disk_probe_depth"] == 8 and r["disk_fraction"] == pytest.approx(0.6) for r in prefetch)
    over_qd1 = [r["disk_fraction"] * deep * PROBE_MIB_S[8] / PROBE_MIB_S[1] for r in prefetch]
    assert all(x > 1 for x in over_qd1) or deep < 1
    result = compared(_run(tmp_path, key, figures), as_finding(sweep_finding()))
    assert result.verdict == REPRODUCED, result.reasons
    assert result.claims and all(c.holds for c in result.claims)


@pytest.mark.parametrize(
    ("regression", "failed"),
    [
        # demand mmap reads twice what it did (read-around back on, reclaim regressed)
        ({"reads": {"demand-mmap": 2.0}}, {("measured_over_lru", "demand-mmap")}),
        # the expert cache reads 30% more than its own policy's replay: the cache misbehaves,
        # reads more than LRU's and demand mmap's and, at the same pace, decodes slower
        (
            {"reads": {"expert-lru": 1.3}},
            {
                ("measured_over_replay", "expert-lru"),
                ("measured_over_lru", "expert-lru"),
                ("reads_over_demand_mmap", "expert-lru"),
                ("decode_over_demand_prefetch", "expert-lru"),
            },
        ),
        # the expert cache's readers slow to half their pace: it decodes slower than prefetch
        ({"pace": {"expert-lru": 0.5}}, {("decode_over_demand_prefetch", "expert-lru")}),
    ],
)
def test_a_plausible_bad_run_is_not_reproduced_naming_the_quantity(
    tmp_path: Path, key: Path, regression: dict[str, Any], failed: set[tuple[str, str]]
) -> None:
    finding = sweep_finding()
    result = compared(_run(tmp_path, key, sweep(**regression)), as_finding(finding))
    assert result.verdict == NOT_REPRODUCED, result.reasons
    labels = {claim_label(c): (c["quantity"], c["variant"]) for c in finding["sweep"]["claims"]}
    assert {labels[c.claim] for c in result.claims if not c.holds} == failed
    assert all("outside the claimed bounds" in r for r in result.reasons)
    # the same regression on a faster disk is still caught
    faster = compared(_run(tmp_path / "fast", key, sweep(disk=4.0, **regression)), as_finding(finding))
    assert {labels[c.claim] for c in faster.claims if not c.holds} == failed


def test_no_ceiling_is_drafted_where_belady_could_never_reach_it() -> None:
    """Belady/LRU widened by the tolerance past 1 was capped at 1, which Belady never exceeds: a
    ceiling that cannot fail is not drafted; one below 1 is."""
    figures = sweep()
    for row in figures["summary"]:
        row["belady_over_lru"] = 0.9  # 0.9 x 1.25 > 1
    drafted = draft_sweep(figures, "baseline", 0.25)["claims"]
    assert not [c for c in drafted if c["quantity"] == "belady_over_lru"]
    assert [
        c["max"]
        for c in draft_sweep(sweep(), "baseline", 0.25)["claims"]
        if c["quantity"] == "belady_over_lru"
    ] == [0.6875] * 3


@pytest.mark.parametrize(
    ("claim", "why"),
    [
        ({"quantity": "disk_fraction", "min": 0.0, "max": 1.0}, "measures the host"),
        ({"quantity": "disk_fraction", "min": 0.5, "max": None}, "measures the host"),
        ({"quantity": "belady_over_lru", "min": None, "max": 1.0}, "cannot fail"),
        ({"quantity": "capacity_miss_share_lru", "min": 0.0, "max": 1.0}, "cannot fail"),
        ({"quantity": "measured_over_lru", "min": 0.0, "max": None}, "cannot fail"),
        ({"quantity": "reads_over_demand_mmap", "min": None, "max": None}, "cannot fail"),
        ({"quantity": "belady_over_lru", "min": None, "max": 0.99}, None),
        ({"quantity": "capacity_miss_share_lru", "min": 0.5, "max": None}, None),
        ({"quantity": "measured_over_lru", "min": 0.0, "max": 1.5}, None),
        ({"quantity": "decode_over_demand_prefetch", "min": 1.2, "max": None}, None),
    ],
)
def test_a_claim_that_cannot_fail_says_why(claim: dict[str, Any], why: str | None) -> None:
    reason = empty_claim(claim | {"variant": "v", "at": "every"})
    assert (reason is None) if why is None else (why in str(reason))


def test_a_current_finding_with_an_empty_claim_is_refused_a_superseded_one_kept() -> None:
    raw = sweep_finding()
    raw["sweep"]["claims"].append(
        {"quantity": "disk_fraction", "variant": "demand-prefetch", "at": "every", "min": 0.0, "max": 1.0}
    )
    index = len(raw["sweep"]["claims"]) - 1
    errors = validate_finding(raw)
    assert len(errors) == 1 and errors[0].startswith(
        f"/sweep/claims/{index}: disk_fraction measures the host"
    )
    old = raw | {"status": "superseded", "superseded_by": "x", "superseded_because": ["remeasured"]}
    assert validate_finding(old) == []  # never compared: it keeps what it claimed


def _midpoint(claim: dict[str, Any]) -> float:
    low, high = claim["min"], claim["max"]
    if low is not None and high is not None:
        return float((low * high) ** 0.5)
    return float(high * 0.9 if high is not None else low * 1.1)


def test_the_demo_finding_fails_a_regressed_run_and_holds_on_any_disk() -> None:
    """evidence/tiny-oversub-sweep-calibrated (what make demo compares with): a run inside its
    bounds holds whatever the disk fraction, the same run with demand mmap reading twice as much
    fails on exactly that quantity."""
    finding = json.loads((REPO / "evidence" / "tiny-oversub-sweep-calibrated.json").read_text())
    claims = finding["sweep"]["claims"]
    rows = [
        {"memory_limit": limit, "variant": variant, "disk_probe_depth": 8, "disk_fraction": fraction}
        for limit in finding["sweep"]["limits_bytes"]
        for variant in finding["variants"]
        for fraction in (1.287,)  # above any bound [0, 1] over the probe at QD1
    ]
    by_key = {(r["variant"], r["memory_limit"]): r for r in rows}
    for claim in claims:
        for row in rows:
            if row["variant"] == claim["variant"]:
                row[claim["quantity"]] = _midpoint(claim)
    figures = {"limits": finding["sweep"]["limits_bytes"], "summary": rows}
    assert all(check_claim(figures, c)[0] is True for c in claims)
    for limit in finding["sweep"]["limits_bytes"]:
        by_key["demand-mmap", limit]["measured_over_lru"] *= 2
    failed = [c for c in claims if check_claim(figures, c)[0] is False]
    assert [(c["quantity"], c["variant"]) for c in failed] == [("measured_over_lru", "demand-mmap")]


def test_every_current_finding_claims_only_what_a_run_can_fail() -> None:
    """The audit of issue 52, kept: no current finding bounds the disk fraction or claims bounds
    its quantity can never leave."""
    current = [f for f in load_findings() if f.superseded_by is None]
    assert current
    empty = [
        (f.id, index, reason)
        for f in current
        for index, claim in enumerate((f.raw.get("sweep") or {}).get("claims", []))
        if (reason := empty_claim(claim)) is not None
    ]
    assert empty == []
