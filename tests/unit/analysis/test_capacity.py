"""What a memory limit leaves the expert cache (`appliance.analysis.capacity`): the budget, never
below k experts, the model's experts as the sweep records them, and the anonymous memory taken
from a trial's samples."""

from appliance.analysis.capacity import ModelExperts, anon_bytes, budget_for
from tests.unit.analysis.test_sweep_analysis import EXPERT, EXPERTS


def test_the_budget_is_what_the_limit_leaves_and_never_below_k_experts() -> None:
    limit = 5_000_000 + 20_000_000 + 10 * EXPERT + 999
    assert budget_for(limit, 20_000_000, EXPERTS) == (10 * EXPERT + 999, False)
    assert budget_for(5_000_000 + 2 * EXPERT, 0, EXPERTS) == (4 * EXPERT, True)


def test_the_model_s_experts_as_the_sweep_records_them() -> None:
    """Layers of unequal experts: the largest is the one expert capacity counts in; the
    non-expert bytes are the file less every expert of every layer (worked by hand)."""
    experts = ModelExperts(file_bytes=10_000, expert_bytes={3: 100, 1: 120}, n_experts=8, k=2)
    assert experts.as_dict() == {
        "file_bytes": 10_000,
        "n_experts": 8,
        "k": 2,
        "moe_layers": [1, 3],
        "expert_bytes": 120,
        "expert_bytes_per_layer": {"1": 120, "3": 100},
        "non_expert_bytes": 10_000 - (100 + 120) * 8,
    }
    assert list(experts.as_dict()["expert_bytes_per_layer"]) == ["1", "3"]


def test_anonymous_memory_is_the_larger_sample_and_zero_without_one() -> None:
    assert anon_bytes({}) == 0
    assert anon_bytes({"timing": {}}) == 0
    assert anon_bytes({"timing": {"residency_after_load": {}, "residency_at_end": None}}) == 0
    assert anon_bytes({"timing": {"residency_at_end": {"anon_bytes": 7}}}) == 7
    timing = {"residency_after_load": {"anon_bytes": 9}, "residency_at_end": {"anon_bytes": 7}}
    assert anon_bytes({"timing": timing}) == 9


def test_a_limit_leaving_exactly_k_experts_is_not_clamped() -> None:
    exactly = EXPERTS.non_expert_bytes + 4 * EXPERT
    assert budget_for(exactly, 0, EXPERTS) == (4 * EXPERT, False)
    assert budget_for(exactly - 1, 0, EXPERTS) == (4 * EXPERT, True)
