"""The experts the engine's expert cache (patch 0004) holds at most, for a cache trial's predicted
peak: the capacity's (and the lookahead's) largest chosen experts, or an oversized event's."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.planner.accounting import Accounting, account_file
from appliance.planner.cache_pages import READ_CHUNK_BYTES, cache_peak
from appliance.planner.plan import predicted_peak_bytes
from appliance.trace.format import chosen_experts
from tests.models import tiny_model
from tests.unit.trace.test_replay_bytes import SIZES, two_size_trace

LAYER_0 = {(0, e) for e in range(4)}
LAYER_1 = {(1, e) for e in range(4)}  # the larger experts (SIZES: 3 and 5 bytes)
CHOSEN = sorted(LAYER_0 | LAYER_1)  # the two-size trace chooses every expert of both layers


@pytest.fixture(scope="module")
def sizes() -> Accounting:
    return dataclasses.replace(account_file(tiny_model("qwen3moe")), expert_bytes_by_layer=SIZES)


def test_the_capacitys_largest_experts_and_an_oversized_events_own(sizes: Accounting) -> None:
    # the two-size trace's largest event is its prompt at layer 1: experts 0-3 of 5 bytes each
    peak = cache_peak(sizes, two_size_trace(), CHOSEN, {"capacity": 3, "io_depth": 8, "lookahead": 0})
    assert peak.held == (frozenset({(1, 0), (1, 1), (1, 2)}), frozenset(LAYER_1))
    assert peak.reader_bytes == 8 * READ_CHUNK_BYTES


def test_the_lookahead_reads_k_experts_an_event_beyond_the_capacity(sizes: Accounting) -> None:
    peak = cache_peak(sizes, two_size_trace(), CHOSEN, {"capacity": 4, "io_depth": 2, "lookahead": 1})
    assert peak.held == (frozenset(LAYER_1 | {(0, 0), (0, 1)}),)  # 4 + 1 x k = 6; no event over 4
    assert peak.reader_bytes == 2 * READ_CHUNK_BYTES
    oversized = cache_peak(sizes, two_size_trace(), CHOSEN, {"capacity": 2, "io_depth": 1, "lookahead": 1})
    assert oversized.held == (frozenset(LAYER_1), frozenset(LAYER_1 | {(0, 0), (0, 1)}))


def test_a_cache_that_holds_every_chosen_expert_predicts_the_demand_mapped_peak() -> None:
    acc = account_file(tiny_model("qwen3moe"))
    trace = two_size_trace()
    chosen = chosen_experts(trace.layers, trace.ids)
    limit = acc.file_size * 2
    plain = predicted_peak_bytes(acc, limit, ctx=8, experts=chosen)
    roomy = cache_peak(acc, trace, chosen, {"capacity": 100, "io_depth": 0, "lookahead": 0})
    assert roomy.held == (frozenset(chosen),)
    assert predicted_peak_bytes(acc, limit, ctx=8, experts=chosen, cache=roomy) == plain
    readers = cache_peak(acc, trace, chosen, {"capacity": 100, "io_depth": 4})
    with_readers = predicted_peak_bytes(acc, limit, ctx=8, experts=chosen, cache=readers)
    assert with_readers == plain + 4 * READ_CHUNK_BYTES
    small = cache_peak(acc, trace, chosen, {"capacity": 4, "io_depth": 0, "lookahead": 0})
    one = max(acc.expert_bytes_by_layer.values())
    assert plain - 5 * one < predicted_peak_bytes(acc, limit, ctx=8, experts=chosen, cache=small) < plain
