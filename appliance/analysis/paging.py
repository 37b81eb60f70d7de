"""How many bytes a cold, memory-limited trial should read, from its own route trace.

The model's non-expert tensors are read once; routed experts are paged like a cache of
whole experts holding the bytes the memory limit leaves after the non-expert bytes and the
engine's anonymous memory (`appliance.analysis.capacity`, shared with the sweep), each expert
costing its own layer's bytes. An LRU replay of the trial's trace under that byte budget (one
global pool, MoE atomic events) gives the expert misses; each miss reads one expert. The
ratio measured/predicted then says how far the kernel's paging (4 KiB faults, readahead,
page-cache reclaim that is not LRU over experts) is from that idealized cache.
"""

from pathlib import Path
from typing import Any

import numpy as np

from appliance.analysis.capacity import anon_bytes, budget_for, model_experts
from appliance.analysis.contamination import contamination
from appliance.analysis.sweep_analysis import phase_reads, predicted_budget_reads
from appliance.runs.timing import timing_of
from appliance.trace.events import trace_events
from appliance.trace.format import chosen_experts, read_trace
from appliance.trace.replay import ReplaySetup, replay_budget


def predicted_cold_read(
    trace_path: Path, model_path: Path, memory_limit: int, anon_bytes: int
) -> dict[str, Any]:
    trace = read_trace(trace_path)
    experts = model_experts(model_path, trace)
    non_expert, one_expert = experts.non_expert_bytes, experts.one_expert
    budget, _ = budget_for(memory_limit, anon_bytes, experts)
    setup = ReplaySetup(events=trace_events(trace), k=trace.k, expert_bytes=experts.expert_bytes)
    lru = replay_budget(setup, "lru", budget, "global")
    predicted = non_expert + int(lru["total"]["bytes_moved"])
    return {
        "policy": "lru",
        "scope": "global",
        "budget_bytes": budget,
        "capacity_experts": budget // one_expert,
        "expert_bytes": one_expert,
        "non_expert_bytes": non_expert,
        "anon_bytes": anon_bytes,
        "expert_misses": int(lru["total"]["misses"]),
        "distinct_experts": distinct_experts(trace.layers, trace.ids),
        "predicted_read_bytes": predicted,
    }


def distinct_experts(layers: np.ndarray, ids: np.ndarray) -> int:
    """(layer, expert) pairs the trace touched: a cold start reads at least these experts."""
    return len(chosen_experts(layers, ids))


def run_trial_contamination(trial: dict[str, Any], trace: Path, model_path: Path) -> dict[str, Any]:
    """The flag for one trial of a run (`appliance run`): its decode reads against Belady at
    the capacity its limit leaves, as the sweep computes them."""
    phases = phase_reads(timing_of(trial))
    if phases is None:
        return {"comparable": True, "checked": False}
    loaded = read_trace(trace)
    experts = model_experts(model_path, loaded)
    budget, _ = budget_for(int(trial["memory_limit"]), anon_bytes(trial), experts)
    belady = predicted_budget_reads(loaded, budget, experts)["belady_bound"]
    return contamination(
        phases["decode"], belady["decode_capacity_read_bytes"], belady["decode_capacity_misses"]
    )
