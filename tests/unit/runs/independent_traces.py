"""Route traces small enough to replay by hand, and the plain-Python replay of any trace's
decode reads, for checking the paging and sweep predictions against numbers worked out
without the code under test.

The hand trace: one prompt step routing every token of every MoE layer to experts P, then
decode steps alternating between experts A and B (k distinct experts each, disjoint). In one
global pool of (layer, expert) objects the decode steps cycle through 2·L·k objects. At a
capacity of at most 2·L·k − k an object is always evicted before its next use (since its last
use, the 2·L·k − k objects of the other events came later, and LRU and FIFO evict the
oldest), so LRU and FIFO miss on every request; at a capacity of 3·L·k everything fits and only
first touches miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from appliance.trace.events import EventStream, trace_events
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, Trace, row_dtype
from appliance.trace.synth import TraceSynthSpec, synth_header
from tests.unit.trace.test_kernels import reference_hits
from tests.unit.trace.test_replay_bytes import reference_bytes


@dataclass(frozen=True)
class HandTrace:
    trace: Trace
    layers: int
    k: int
    decode_steps: int

    @property
    def decode_requests(self) -> int:
        return self.decode_steps * self.layers * self.k

    @property
    def thrashing_capacity(self) -> int:
        """The largest capacity at which LRU and FIFO miss on every request."""
        return 2 * self.layers * self.k - self.k

    @property
    def fitting_capacity(self) -> int:
        return 3 * self.layers * self.k


def hand_trace(layers: int, n_experts: int, k: int, decode_steps: int) -> HandTrace:
    assert 3 * k <= n_experts and decode_steps % 2 == 0
    sets = [list(range(0, k)), list(range(k, 2 * k)), list(range(2 * k, 3 * k))]  # P, A, B
    records = []
    for step in range(decode_steps + 1):
        kind = KIND_PROMPT if step == 0 else KIND_DECODE
        experts = sets[0] if step == 0 else sets[1 + (step - 1) % 2]
        for layer in range(layers):
            records.append((step, layer, kind, 0, step, experts))
    rows = np.array(records, dtype=row_dtype(k, False))
    header = synth_header(TraceSynthSpec(n_layers=layers, n_experts=n_experts, k=k))
    return HandTrace(Trace(header=header, rows=rows), layers, k, decode_steps)


def reference_decode_reads(
    trace: Trace, policy: str, capacity: int, expert_bytes: dict[int, int]
) -> dict[str, int]:
    """Decode misses and bytes of one policy in one global pool, from the plain-Python
    reference replay and a decode mask read row by row (not the code under test's)."""
    stream = trace_events(trace).stream
    return _decode_reads(trace, stream, reference_hits(policy, stream, capacity), expert_bytes)


def reference_budget_decode_reads(
    trace: Trace, policy: str, budget: int, expert_bytes: dict[int, int]
) -> dict[str, int]:
    """The same under a byte budget, each expert costing its layer's bytes (`during-event`),
    from the plain statement of the byte semantics in tests/unit/trace/test_replay_bytes.py."""
    stream = trace_events(trace).stream
    layers = trace.moe_layers
    sizes = [expert_bytes[layers[x // trace.n_experts]] for x in range(stream.n_objects)]
    hits = reference_bytes(policy, stream, sizes, budget, after=False)
    return _decode_reads(trace, stream, hits, expert_bytes)


def _decode_reads(
    trace: Trace, stream: EventStream, hits: Any, expert_bytes: dict[int, int]
) -> dict[str, int]:
    kind_of_step: dict[int, int] = {}
    for row in trace.rows:
        kind_of_step[int(row["step"])] = int(row["kind"])
    layers = trace.moe_layers
    misses = read = requests = 0
    position = 0
    for event in range(stream.n_events):
        items = stream.items[stream.ptr[event] : stream.ptr[event + 1]]
        decode = kind_of_step[int(stream.step[event])] == KIND_DECODE
        for item in items:
            if decode:
                requests += 1
                if not hits[position]:
                    misses += 1
                    read += expert_bytes[layers[int(item) // trace.n_experts]]
            position += 1
    return {"decode_requests": requests, "decode_misses": misses, "decode_read_bytes": read}
