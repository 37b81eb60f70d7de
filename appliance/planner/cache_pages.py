"""Which experts the engine's expert cache (experimental patch 0004) holds at its peak, for the
planner's predicted peak of a cache trial.

The cache holds at most `capacity` experts: a miss evicts before it loads, except that an event
(one step at one MoE layer) with more distinct experts than that holds every one of its own
while it is computed, and nothing else. `--expert-lookahead N` reads up to N x k more ahead of
their events. An evicted expert's whole pages are dropped (`pages.resident_file_bytes` with
`held`); each reader thread holds one READ_CHUNK_BYTES buffer. Which experts a policy holds when
the cgroup peaks is not in the records, so the prediction takes the most bytes it could be: the
`capacity` + ahead largest of the experts the router chose, or the largest event's with the
ahead largest others. Where a model's experts are all one size that is the exact count; where
they are not (Qwen3-30B-A3B Q4_K_M: 2.65 MB in 24 layers, 3.06 MB in the other 24) it is over by
at most the difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from appliance.planner.accounting import Accounting
from appliance.trace.events import trace_events
from appliance.trace.format import Trace

READ_CHUNK_BYTES = 256 << 10  # patch 0004's read_chunk: each reader thread's buffer

Pair = tuple[int, int]  # (layer, expert)


@dataclass(frozen=True)
class CachePeak:
    """What the cache adds to a demand-mapped trial's peak: the candidate sets of experts it
    holds at most (the page model takes the largest) and its readers' buffers."""

    held: tuple[frozenset[Pair], ...]
    reader_bytes: int


def _largest(pairs: list[Pair], count: int, expert_bytes: dict[int, int]) -> list[Pair]:
    """The `count` pairs of the most bytes (ties in (layer, expert) order)."""
    return sorted(pairs, key=lambda pair: (-expert_bytes.get(pair[0], 0), pair))[: max(count, 0)]


def _largest_event(trace: Trace, expert_bytes: dict[int, int]) -> list[Pair]:
    """The experts of the event (step, MoE layer) whose experts hold the most bytes."""
    stream = (events := trace_events(trace)).stream
    if stream.n_events == 0:
        return []
    layer_bytes = np.array([expert_bytes.get(layer, 0) for layer in events.moe_layers], dtype=np.int64)
    event = int(np.argmax(layer_bytes[stream.layer_index] * np.diff(stream.ptr)))
    j = int(stream.layer_index[event])
    first = j * events.n_experts  # an event's objects are its layer's: j x n_experts + expert
    items = stream.items[stream.ptr[event] : stream.ptr[event + 1]].astype(np.int64) - first
    return [(events.moe_layers[j], int(expert)) for expert in items]


def cache_peak(acc: Accounting, trace: Trace, chosen: list[Pair], record: dict[str, Any]) -> CachePeak:
    """The cache's part of a trial's peak from its route trace, the experts it chose
    (`format.chosen_experts`) and timing.json `expert_cache` (`capacity`, `io_depth`,
    `lookahead`)."""
    sizes = acc.expert_bytes_by_layer
    ahead = int(record.get("lookahead") or 0) * trace.k
    capacity = int(record["capacity"])
    held = [frozenset(_largest(chosen, capacity + ahead, sizes))]
    event = _largest_event(trace, sizes)
    if len(event) > capacity:
        in_event = set(event)
        others = [pair for pair in chosen if pair not in in_event]
        held.append(frozenset(event + _largest(others, ahead, sizes)))
    return CachePeak(tuple(held), int(record.get("io_depth") or 0) * READ_CHUNK_BYTES)
