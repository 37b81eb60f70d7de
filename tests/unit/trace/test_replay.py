"""What replaying a trace allocates, per request: the structure that keeps a replay within
twice the trace file (figures: `make bench-replay`). numpy and numba's runtime report their
arrays to tracemalloc."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.trace import kernels
from appliance.trace.events import trace_events
from appliance.trace.format import ROW_CHUNK, read_trace, write_trace
from appliance.trace.replay import ReplaySetup, replay_budget, replay_one
from appliance.trace.synth import TraceSynthSpec, synth_trace

SPEC = TraceSynthSpec(n_layers=8, n_experts=64, k=8, n_prompt=64, n_ubatch=32, n_decode=40_000, seed=7)


def _peak(work: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = work()
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = synth_trace(SPEC)
    return write_trace(tmp_path_factory.mktemp("mem") / "t.moetrace", trace.header, trace.rows)


def test_events_take_two_bytes_a_request_and_fourteen_an_event(trace_file: Path) -> None:
    """Rows are read a chunk at a time: besides the events (2 bytes a request, 8 + 4 + 2 an
    event, all bounded by one event per row and k requests per row), building them holds only
    a few 8-byte words per request of one chunk: under the 8 bytes a request that one int64
    array of the requests would take (the whole-trace int64 build took over 40)."""
    trace = read_trace(trace_file)
    n_rows = len(trace.rows)
    assert n_rows > 10 * ROW_CHUNK
    events, peak = _peak(lambda: trace_events(trace))
    stream = events.stream
    kept = n_rows * trace.k * 2 + (n_rows + 1) * 8 + n_rows * (4 + 2)
    assert stream.items.itemsize == 2 and stream.n_requests > n_rows * trace.k * 0.9
    assert peak < kept + 64 * ROW_CHUNK * trace.k
    assert peak < 8 * stream.n_requests


@pytest.mark.parametrize(("policy", "per_request"), [("lru", 1), ("lfu", 1), ("fifo", 1), ("belady", 5)])
def test_a_replay_allocates_its_hit_flags_and_belady_its_next_uses(
    trace_file: Path, policy: str, per_request: int
) -> None:
    """Beside the events, a replay holds one hit flag a request (1 byte), Belady its next uses
    too (4 bytes), and per-object arrays: hits are tallied per layer in a kernel, with no
    per-request or per-event copy (the int64 tally took over 30 bytes a request)."""
    trace = read_trace(trace_file)
    setup = ReplaySetup(events=trace_events(trace), k=trace.k, expert_bytes=None)
    stream = setup.events.stream
    kernels.compile_kernels()
    replay_one(setup, policy, 64, "global")  # compiles the kernels for these types, not measured
    result, peak = _peak(lambda: replay_one(setup, policy, 64, "global"))
    assert result["total"]["requests"] == stream.n_requests
    assert peak < per_request * stream.n_requests + (1 << 20)
    assert np.dtype(kernels.next_use_events(stream.ptr, stream.items, stream.n_objects).dtype).itemsize == 4


@pytest.mark.parametrize(("policy", "per_request"), [("lru", 1), ("belady", 5)])
def test_a_byte_budget_replay_during_event_passes_no_tick_per_request(
    trace_file: Path, policy: str, per_request: int
) -> None:
    """Under a byte budget (`during-event`) a request's tick is its position, computed in the
    kernel: no 8-byte array of ticks a request."""
    trace = read_trace(trace_file)
    sizes = {layer: 1000 for layer in trace.moe_layers}
    setup = ReplaySetup(events=trace_events(trace), k=trace.k, expert_bytes=sizes)
    stream = setup.events.stream
    kernels.compile_kernels()
    replay_budget(setup, policy, 64_000, "global")  # compiles the kernels for these types
    result, peak = _peak(lambda: replay_budget(setup, policy, 64_000, "global"))
    assert result["total"]["requests"] == stream.n_requests
    assert result["total"]["hits"] == replay_one(setup, policy, 64, "global")["total"]["hits"]
    assert peak < per_request * stream.n_requests + (1 << 20)
