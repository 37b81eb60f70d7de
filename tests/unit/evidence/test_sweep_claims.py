"""Sweep claims: drafted from a sweep's summary, checked against another sweep's."""

from typing import Any

import jsonschema

from appliance.evidence.finding import load_schema
from appliance.evidence.sweep_claims import check_claim, draft_sweep, empty_claim, limits_mismatch

LIMITS = [100, 200, 500]


def _summary(ratio_small: float) -> dict[str, Any]:
    rows = []
    for limit, ratio, share in zip(LIMITS, (ratio_small, 1.0, 1.1), (0.8, 0.4, 0.0), strict=True):
        for variant in ("baseline", "demand-mmap"):
            rows.append(
                {
                    "memory_limit": limit,
                    "variant": variant,
                    "measured_over_lru": ratio if variant == "demand-mmap" else 9.0,
                    "belady_over_lru": 0.7,
                    "disk_fraction": 0.2,
                    "capacity_miss_share_lru": share,
                }
            )
    return {"limits": LIMITS, "summary": rows}


def test_a_draft_bounds_what_was_measured_and_validates() -> None:
    drafted = draft_sweep(_summary(0.9), "baseline", 0.25)
    assert drafted["limits_bytes"] == LIMITS
    by_key = {(c["quantity"], c["variant"]): c for c in drafted["claims"]}
    assert ("measured_over_lru", "baseline") not in by_key  # the thrashing baseline: no claim
    lru = by_key[("measured_over_lru", "demand-mmap")]
    assert (lru["min"], lru["max"], lru["at"]) == (0.72, 1.375, "every")
    assert by_key[("belady_over_lru", "demand-mmap")] | {} == {
        "quantity": "belady_over_lru",
        "variant": "demand-mmap",
        "at": "smallest",
        "min": None,
        "max": 0.875,
    }
    # the disk fraction is the host's disk against its CPU: never claimed, for any variant
    assert not [c for c in drafted["claims"] if c["quantity"] == "disk_fraction"]
    assert all(empty_claim(c) is None for c in drafted["claims"])
    assert by_key[("capacity_miss_share_lru", "demand-mmap")]["at"] == "smallest"
    schema = load_schema()
    sweep_schema = {"definitions": schema["definitions"], "$ref": "#/definitions/sweep"}
    assert list(jsonschema.Draft7Validator(sweep_schema).iter_errors(drafted)) == []


def test_claims_hold_or_fail_naming_the_limit() -> None:
    claim = next(
        c
        for c in draft_sweep(_summary(0.9), "baseline", 0.25)["claims"]
        if c["quantity"] == "measured_over_lru"
    )
    assert check_claim(_summary(1.0), claim)[0] is True
    holds, reason = check_claim(_summary(2.0), claim)
    assert holds is False and "2 at 100 bytes" in reason
    missing = check_claim({"summary": []}, claim)
    assert missing[0] is None and "no measured_over_lru" in missing[1]


def test_other_limits_are_not_comparable() -> None:
    assert limits_mismatch(_summary(1.0), LIMITS) is None
    assert "other sweep limits" in str(limits_mismatch(_summary(1.0), [100, 200]))
    assert "not a sweep" in str(limits_mismatch(None, LIMITS))


def test_cache_claims_bound_the_expert_cache_summary() -> None:
    sweep = _summary(1.0) | {
        "expert_cache": {
            "summary": [
                {
                    "memory_limit": 100,
                    "variant": "expert-belady",
                    "measured_over_replay": 0.994,
                    "reads_over_demand_mmap": 0.70,
                },
                {
                    "memory_limit": 200,
                    "variant": "expert-belady",
                    "measured_over_replay": 1.07,
                    "reads_over_demand_mmap": 0.31,
                },
            ]
        }
    }
    replay = {
        "quantity": "measured_over_replay",
        "variant": "expert-belady",
        "at": "every",
        "min": 0.95,
        "max": 1.05,
    }
    holds, reason = check_claim(sweep, replay)
    assert holds is False and reason == "observed 1.07 at 200 bytes: outside the claimed bounds"
    smallest = replay | {"at": "smallest"}
    assert check_claim(sweep, smallest) == (True, "observed 0.994: within the claimed bounds")
    mmap = {
        "quantity": "reads_over_demand_mmap",
        "variant": "expert-belady",
        "at": "every",
        "min": None,
        "max": 0.75,
    }
    assert check_claim(sweep, mmap) == (True, "observed 0.7, 0.31: within the claimed bounds")
    # the sweep's own summary has no such quantity: a sweep without cache trials cannot hold it
    assert check_claim(_summary(1.0), mmap) == (
        None,
        "results.json sweep.expert_cache has no reads_over_demand_mmap for 'expert-belady' "
        "at the every limit",
    )
    schema = load_schema()
    claim_schema = {"definitions": schema["definitions"], "$ref": "#/definitions/sweep_claim"}
    assert list(jsonschema.Draft7Validator(claim_schema).iter_errors(mmap)) == []


def test_a_draft_bounds_each_cache_policy_by_its_replay_and_demand_mmap() -> None:
    sweep = _summary(1.0) | {
        "expert_cache": {
            "summary": [
                {
                    "memory_limit": 100,
                    "variant": "demand-mmap",
                    "measured_over_replay": None,
                    "reads_over_demand_mmap": 1.0,
                },
                {
                    "memory_limit": 100,
                    "variant": "expert-lru",
                    "measured_over_replay": 0.993,
                    "reads_over_demand_mmap": 0.96,
                },
                {
                    "memory_limit": 200,
                    "variant": "expert-lru",
                    "measured_over_replay": 1.001,
                    "reads_over_demand_mmap": 1.1,
                },
                {
                    "memory_limit": 100,
                    "variant": "expert-fifo",
                    "measured_over_replay": 1.2,
                    "reads_over_demand_mmap": 0.5,
                },
            ]
        }
    }
    claims = [c for c in draft_sweep(sweep, "baseline", 0.25)["claims"] if c["variant"].startswith("expert-")]
    assert claims == [
        {
            "quantity": "measured_over_replay",
            "variant": "expert-lru",
            "at": "every",
            "min": 0.95,
            "max": 1.05,
        },
        {
            "quantity": "reads_over_demand_mmap",
            "variant": "expert-lru",
            "at": "every",
            "min": None,
            "max": 1.375,
        },
        # fifo's reads were 1.2x its replay: no replay claim, only the bound against demand mmap
        {
            "quantity": "reads_over_demand_mmap",
            "variant": "expert-fifo",
            "at": "every",
            "min": None,
            "max": 0.625,
        },
    ]
    assert all(check_claim(sweep, c)[0] is True for c in claims)


def test_a_decode_rate_ratio_is_drafted_only_from_medians_of_three_repeats() -> None:
    def cache_rows(n: int) -> dict[str, object]:
        rows = [
            {"memory_limit": 100, "variant": "expert-belady", "n": n, "measured_over_replay": 1.0},
            {"memory_limit": 200, "variant": "expert-belady", "n": n, "measured_over_replay": 1.0},
        ]
        for row, rate in zip(rows, (2.5, 1.8), strict=True):
            row |= {"reads_over_demand_mmap": 0.6, "decode_over_demand_prefetch": rate}
        return _summary(1.0) | {"expert_cache": {"summary": rows}}

    three = cache_rows(3)
    rates = [
        c
        for c in draft_sweep(three, "baseline", 0.25)["claims"]
        if c["quantity"] == "decode_over_demand_prefetch"
    ]
    # the smallest median seen (1.8) narrowed by the tolerance: 1.8 / 1.25
    assert rates == [
        {
            "quantity": "decode_over_demand_prefetch",
            "variant": "expert-belady",
            "at": "every",
            "min": 1.44,
            "max": None,
        }
    ]
    assert check_claim(three, rates[0]) == (True, "observed 2.5, 1.8: within the claimed bounds")
    slower = cache_rows(3)
    slower["expert_cache"]["summary"][1]["decode_over_demand_prefetch"] = 1.2  # type: ignore[index]
    assert check_claim(slower, rates[0]) == (False, "observed 1.2 at 200 bytes: outside the claimed bounds")
    two = cache_rows(2)
    assert not [
        c
        for c in draft_sweep(two, "baseline", 0.25)["claims"]
        if c["quantity"] == "decode_over_demand_prefetch"
    ]
