"""The cold-read prediction (analysis/paging.py) against numbers worked out by hand: a real
synthesized GGUF (its expert and non-expert bytes summed from the tensor table), a hand-made
trace whose LRU misses are known without replaying it (tests/unit/runs/independent_traces.py)."""

from pathlib import Path

import numpy as np
import pytest

from appliance.analysis.capacity import anon_bytes
from appliance.analysis.paging import distinct_experts, predicted_cold_read, run_trial_contamination
from appliance.planner.accounting import account_file
from appliance.trace.format import write_trace
from tests.models import tiny_model
from tests.unit.runs.independent_traces import HandTrace, hand_trace

ANON = 3_000_000


@pytest.fixture(scope="module")
def model() -> Path:
    return tiny_model("qwen3moe", size="32MiB")


def _facts(model: Path) -> tuple[int, int, int, int, int]:
    """(layers, experts, k, bytes of one expert, non-expert bytes) from the tensor table."""
    accounting = account_file(model)
    per_layer = set(accounting.expert_bytes_by_layer.values())
    assert len(per_layer) == 1  # every MoE layer's expert has the same size in this model
    routed = accounting.groups["routed_experts"]
    return (
        len(accounting.expert_bytes_by_layer),
        accounting.facts.experts,
        accounting.facts.experts_used,
        per_layer.pop(),
        model.stat().st_size - routed,
    )


def _write(hand: HandTrace, tmp_path: Path) -> Path:
    return write_trace(tmp_path / "t.moetrace", hand.trace.header, hand.trace.rows)


@pytest.mark.parametrize("fits", [False, True])
def test_predicted_cold_read_by_hand(fits: bool, model: Path, tmp_path: Path) -> None:
    layers, experts, k, one, non_expert = _facts(model)
    hand = hand_trace(layers, experts, k, decode_steps=6)
    capacity = hand.fitting_capacity if fits else hand.thrashing_capacity
    limit = non_expert + ANON + capacity * one + one - 1  # room for capacity experts, not one more
    result = predicted_cold_read(_write(hand, tmp_path), model, limit, ANON)
    prompt = layers * k
    misses = 3 * layers * k if fits else prompt + hand.decode_requests
    assert result == {
        "policy": "lru",
        "scope": "global",
        "budget_bytes": capacity * one + one - 1,
        "capacity_experts": capacity,
        "expert_bytes": one,
        "non_expert_bytes": non_expert,
        "anon_bytes": ANON,
        "expert_misses": misses,
        "distinct_experts": 3 * layers * k,
        "predicted_read_bytes": non_expert + misses * one,
    }


def test_a_limit_below_k_experts_still_replays_k(model: Path, tmp_path: Path) -> None:
    layers, experts, k, one, non_expert = _facts(model)
    hand = hand_trace(layers, experts, k, decode_steps=2)
    result = predicted_cold_read(_write(hand, tmp_path), model, non_expert, ANON)
    assert result["capacity_experts"] == k
    assert result["expert_misses"] == 3 * layers * k  # k slots: every request misses


def test_distinct_experts_counts_layer_expert_pairs() -> None:
    layers = np.array([0, 0, 1, 1, 2], dtype=np.uint16)
    ids = np.array([[0, 1], [1, 0], [0, 1], [3, 1], [3, 3]], dtype=np.int32)
    # layer 0: {0, 1}; layer 1: {0, 1, 3}; layer 2: {3}
    assert distinct_experts(layers, ids) == 6


def test_distinct_experts_keeps_layers_apart_however_far() -> None:
    layers = np.array([0, 2], dtype=np.uint16)  # layers far apart stay apart
    ids = np.array([[1], [0]], dtype=np.int32)
    assert distinct_experts(layers, ids) == 2


def _timing(decode_read_bytes: int | None) -> dict[str, object]:
    """A trial's timing.json: the engine's anonymous memory and, unless None, its io counters
    with decode_read_bytes read between the end of prefill and the end of decode."""
    timing: dict[str, object] = {"residency_after_load": {"anon_bytes": ANON}}
    if decode_read_bytes is not None:
        timing["io"] = {
            "load_end": {"read_bytes": 1_000_000},
            "prefill_end": {"read_bytes": 1_200_000},
            "decode_end": {"read_bytes": 1_200_000 + decode_read_bytes},
        }
    return timing


def test_a_run_trial_below_belady_at_k_slots_is_flagged(model: Path, tmp_path: Path) -> None:
    """At a limit that leaves exactly k expert slots, every decode request misses for any
    policy, Belady too; of those, A's and B's first touches (2·L·k) are not capacity misses,
    so Belady must re-read (decode_steps − 2)·L·k experts. Page rounding allows two pages each."""
    layers, experts, k, one, non_expert = _facts(model)
    decode_steps = 6
    trace = _write(hand_trace(layers, experts, k, decode_steps), tmp_path)
    limit = non_expert + ANON + k * one + one - 1
    rereads = (decode_steps - 2) * layers * k
    floor = rereads * one - rereads * 2 * 4096

    def flag(decode_read_bytes: int | None) -> dict[str, object]:
        trial = {"memory_limit": limit, "timing": _timing(decode_read_bytes)}
        return run_trial_contamination(trial, trace, model)

    assert flag(floor) == {"comparable": True, "checked": True, "belady_floor_bytes": floor}
    below = flag(floor - 1)
    assert below["comparable"] is False and below["belady_floor_bytes"] == floor
    assert str(below["reason"]).startswith(
        f"measured decode reads {floor - 1} B are below the {rereads * one} B Belady must re-read"
    )
    assert flag(None) == {"comparable": True, "checked": False}


def test_anonymous_memory_is_the_larger_engine_sample_and_zero_without_one() -> None:
    assert anon_bytes({}) == 0
    assert anon_bytes({"timing": {"residency_after_load": {}}}) == 0
    both = {"residency_after_load": {"anon_bytes": 5_000}, "residency_at_end": {"anon_bytes": 7_000}}
    assert anon_bytes({"timing": both}) == 7_000
    assert anon_bytes({"timing": {"residency_at_end": {"anon_bytes": 3}}}) == 3
