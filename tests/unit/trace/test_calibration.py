"""The range of real routing (`appliance.trace.calibration`): computed from the three vendored
traces, and which statistics of a trace fall outside it."""

from __future__ import annotations

import pytest

from appliance.trace.calibration import (
    PER_LAYER_REUSE,
    TINY_OUTSIDE,
    outside,
    real_range,
    real_traces,
    statistics,
)
from appliance.trace.locality import locality
from tests.unit.trace.test_locality import TABLE, hand_trace


@pytest.fixture(scope="module")
def ranges() -> dict[str, tuple[float, float]]:
    return real_range()


def test_the_range_spans_issue_34s_table(ranges: dict[str, tuple[float, float]]) -> None:
    assert sorted(name for name, _ in real_traces()) == sorted(TABLE)
    touched, hottest, reuse = zip(*TABLE.values(), strict=True)
    low, high = ranges["pairs touched"]
    assert (round(100 * low, 1), round(100 * high, 1)) == (min(touched), max(touched))
    low, high = ranges["hottest / uniform"]
    assert (round(low, 1), round(high, 1)) == (min(hottest), max(hottest))
    low, high = ranges["next-token reuse"]
    assert (round(100 * low, 1), round(100 * high, 1)) == (min(reuse), max(reuse))
    # per layer: every layer of every trace (Qwen3-30B's layer 0 keeps 6.7%, its layer 30 67.1%)
    low, high = ranges[PER_LAYER_REUSE]
    assert low < 0.067 and round(high, 3) == 0.671
    assert len(ranges) == 19  # 4 + 9 distance buckets + 2 policies x 3 capacities
    assert set(ranges) >= TINY_OUTSIDE


def test_each_real_trace_lies_inside_the_range(ranges: dict[str, tuple[float, float]]) -> None:
    for _, trace in real_traces():
        assert outside(locality(trace), ranges) == []


def test_a_value_outside_is_one_line_naming_the_statistic() -> None:
    loc = locality(hand_trace())
    stats = statistics(loc)
    assert stats[PER_LAYER_REUSE] == [0.75, 0.0] and stats["pairs touched"] == [0.875]
    ranges = {name: (0.0, 1.0) for name in stats} | {"pairs touched": (0.2, 0.5), PER_LAYER_REUSE: (0.1, 0.8)}
    ranges["hottest / uniform"] = (1.0, 3.0)
    assert outside(loc, ranges) == [
        "pairs touched: 0.875 outside the real range 0.2 .. 0.5",
        "next-token reuse per layer: 0 outside the real range 0.1 .. 0.8",
    ]
