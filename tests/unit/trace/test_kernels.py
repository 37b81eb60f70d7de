"""The compiled engine against a plain-Python statement of the event semantics.

The reference below is written from the definitions in `appliance.trace.kernels`'s docstring,
with O(capacity) scans and no shared code, so a disagreement is a bug in one of them.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

from appliance.core.errors import ConfigError
from appliance.trace import kernels
from appliance.trace.events import (
    SMALL_OBJECTS,
    EventStream,
    item_type,
    single_item_stream,
    sorted_distinct,
    trace_events,
)
from appliance.trace.format import Trace, row_dtype
from appliance.trace.replay import ReplaySetup, pool_hits, replay_one
from appliance.trace.synth import TraceSynthSpec, synth_trace


def reference_hits(
    policy: str, stream: EventStream, capacity: int, counts: np.ndarray | None = None
) -> list[int]:
    L = stream.n_layers
    events = [
        (
            int(stream.step[e]),
            int(stream.layer_index[e]),
            [int(x) for x in stream.items[stream.ptr[e] : stream.ptr[e + 1]]],
        )
        for e in range(stream.n_events)
    ]
    next_event: dict[tuple[int, int], float] = {}
    upcoming: dict[int, float] = {}
    for e in range(len(events) - 1, -1, -1):
        for x in events[e][2]:
            next_event[(e, x)] = upcoming.get(x, float("inf"))
            upcoming[x] = e
    resident: dict[int, dict] = {}
    decayed: dict[int, float] = {}
    tick = 0
    out: list[int] = []
    for e, (step, lidx, items) in enumerate(events):
        t = step * L + lidx
        out.extend(1 if x in resident else 0 for x in items)
        todo = items
        if len(items) > capacity:
            todo = items[len(items) - capacity :]
            for x in [x for x in resident if x not in todo]:
                del resident[x]
        pinned = set(todo)

        def key(x: int, t: int = t, e: int = e) -> tuple:
            st = resident[x]
            if policy == "fifo":
                return (st["ins"],)
            if policy == "lru":
                return (st["last"],)
            if policy == "lfu":
                return (st["freq"], st["last"])
            if policy == "lfru":
                return (decayed[x], st["last"])
            if policy == "least-stale":
                age = t - st["u"]
                return (-(age // L), age % L, st["last"])
            if policy == "static-hot":
                return (counts[x], st["last"])
            return (-st["next"], x)

        for x in todo:
            tick += 1
            if x not in resident:
                if len(resident) == capacity:
                    victim = min((y for y in resident if y not in pinned), key=key)
                    del resident[victim]
                resident[x] = {"ins": tick, "freq": 0}
            st = resident[x]
            st["last"], st["u"], st["freq"] = tick, t, st["freq"] + 1
            st["next"] = next_event[(e, x)]
            now = step / kernels.LFRU_HALF_LIFE_STEPS
            decayed[x] = float(np.log2(np.exp2(decayed.get(x, -np.inf) - now) + 1.0) + now)
    return out


SPECS = [
    TraceSynthSpec(
        n_layers=3,
        n_experts=12,
        k=3,
        n_prompt=20,
        n_ubatch=8,
        n_decode=40,
        skew=0.8,
        correlation=0.4,
        seed=11,
    ),
    TraceSynthSpec(
        n_layers=2, n_experts=16, k=2, n_prompt=9, n_ubatch=9, n_decode=60, skew=1.6, correlation=0.1, seed=12
    ),
]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("scope", ["per-layer", "global"])
@pytest.mark.parametrize("policy", kernels.POLICIES)
def test_engine_matches_reference(spec: TraceSynthSpec, scope: str, policy: str) -> None:
    events = trace_events(synth_trace(spec))
    code = kernels.CODES[policy]
    for pool in events.pools(scope):
        counts = np.bincount(pool.items, minlength=pool.n_objects).astype(np.float64)
        # capacities below, at and above the largest (prefill) event, up to everything
        for capacity in sorted(
            {
                spec.k,
                spec.k + 1,
                pool.max_event_size() - 1,
                pool.max_event_size(),
                pool.max_event_size() + 3,
                pool.n_objects,
            }
        ):
            if capacity < spec.k:
                continue
            ours = pool_hits(pool, code, capacity, counts, None).tolist()
            assert ours == reference_hits(policy, pool, capacity, counts), (policy, capacity)


@pytest.mark.parametrize("scope", ["per-layer", "global"])
def test_one_pass_lru_curve_equals_replays(scope: str) -> None:
    events = trace_events(synth_trace(SPECS[0]))
    for pool in events.pools(scope):
        depths = kernels.lru_depths(pool.ptr, pool.items, pool.n_objects)
        for capacity in range(SPECS[0].k, pool.n_objects + 1):
            flags = pool_hits(pool, kernels.LRU, capacity, None, None)
            assert np.array_equal(flags, ((depths >= 1) & (depths <= capacity)).astype(np.uint8))


def test_least_stale_equals_lru_per_layer_but_not_global() -> None:
    setup = ReplaySetup(events=trace_events(synth_trace(SPECS[0])), k=3, expert_bytes=None)
    for capacity in (3, 5, 8):
        assert (
            replay_one(setup, "least-stale", capacity, "per-layer")["layers"]
            == replay_one(setup, "lru", capacity, "per-layer")["layers"]
        )
    differs = [
        replay_one(setup, "least-stale", c, "global")["total"]["hits"]
        != replay_one(setup, "lru", c, "global")["total"]["hits"]
        for c in (6, 9, 12)
    ]
    assert any(differs)


def test_event_union_and_order() -> None:
    trace = synth_trace(SPECS[0])
    events = trace_events(trace).stream
    rows = trace.rows
    # first event = step 0, layer 0: the union of that micro-batch's experts, ascending
    sel = (rows["step"] == 0) & (rows["layer"] == 0)
    assert events.items[events.ptr[0] : events.ptr[1]].tolist() == sorted(
        set(rows["ids"][sel].ravel().tolist())
    )
    assert events.n_events == trace.n_steps * 3
    assert events.step.tolist() == sorted(events.step.tolist())


def test_least_stale_avoids_cyclic_collisions_that_defeat_lru() -> None:
    # Three MoE layers, one expert each, the same expert every token: a cycle of 3 objects
    # through a global pool of 2. LRU always evicts the expert the next layer needs;
    # Least-Stale evicts the one whose layer was just passed, as Belady does here.
    from appliance.trace.format import Trace, row_dtype

    n_tokens = 30
    rows = np.zeros(n_tokens * 3, dtype=row_dtype(1, False))
    rows["step"] = np.repeat(np.arange(n_tokens), 3)
    rows["layer"] = np.tile(np.arange(3), n_tokens)
    rows["kind"] = 1
    rows["pos"] = rows["step"]
    rows["ids"][:, 0] = rows["layer"]
    header = {
        "format": "moetrace",
        "version": 1,
        "n_layers": 3,
        "moe_layers": [0, 1, 2],
        "n_experts": 4,
        "n_expert_used": 1,
        "has_weights": False,
    }
    setup = ReplaySetup(events=trace_events(Trace(header=header, rows=rows)), k=1, expert_bytes=None)
    hits = {p: replay_one(setup, p, 2, "global")["total"]["hits"] for p in ("lru", "least-stale", "belady")}
    assert hits["lru"] == 0
    assert hits["least-stale"] == hits["belady"] > n_tokens


# --- compile_kernels in this process ---------------------------------------------------
# compile_kernels in this process (test_kernel_modes and test_kernel_cache check the compiled
# replay in a subprocess, where a mutation of this module is never seen): every function marked
# @kernel, and only those, is replaced by a numba dispatcher of itself with its options, cached
# under the appliance cache unless numba already has a cache directory. numba compiles lazily, on
# a dispatcher's first call, so nothing is compiled here; the module is put back afterwards.


def _marked_in_source() -> list[str]:
    """The functions of kernels.py decorated with @kernel(...), read from its source."""
    tree = ast.parse(Path(inspect.getfile(kernels)).read_text())
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(
            isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "kernel"
            for d in node.decorator_list
        )
    ]


def _as_plain_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel back to its plain-Python function, as before compile_kernels."""
    for func, _ in kernels._KERNELS:
        monkeypatch.setattr(kernels, func.__name__, func)
    monkeypatch.setattr(kernels, "_compiled", False)


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """The kernels module as plain Python, as before compile_kernels (the trace tests' conftest
    compiles them for the session), numba's cache dir unset; all put back afterwards."""
    from numba.core import config

    _as_plain_python(monkeypatch)
    monkeypatch.setattr(config, "CACHE_DIR", "")
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))
    return monkeypatch


def test_every_marked_function_is_a_kernel_with_its_options() -> None:
    assert [func.__name__ for func, _ in kernels._KERNELS] == _marked_in_source()
    options = {func.__name__: opts for func, opts in kernels._KERNELS}
    assert options["_unlink"] == {"inline": "always"} and options["_lru_depths"] == {}


def test_compile_kernels_replaces_each_kernel_by_its_cached_dispatcher(
    restored: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from numba.core import config
    from numba.core.registry import CPUDispatcher

    plain = {func.__name__: func for func, _ in kernels._KERNELS}
    assert all(getattr(kernels, name) is func for name, func in plain.items())
    assert kernels.cache_stats() == {}  # nothing compiled, nothing counted
    kernels.compile_kernels()
    assert kernels._compiled is True
    assert str(tmp_path / "cache" / "numba") == config.CACHE_DIR
    for func, options in kernels._KERNELS:
        dispatcher = getattr(kernels, func.__name__)
        assert isinstance(dispatcher, CPUDispatcher), func.__name__
        assert dispatcher.py_func is func
        assert dispatcher.targetoptions["nopython"] is True, func.__name__
        assert {k: dispatcher.targetoptions[k] for k in options} == options, func.__name__
        assert str(dispatcher.stats.cache_path).startswith(str(tmp_path / "cache" / "numba")), func.__name__
    first = {name: getattr(kernels, name) for name in plain}
    kernels.compile_kernels()  # once per process
    assert all(getattr(kernels, name) is first[name] for name in plain)


def test_a_cache_directory_numba_already_has_wins(restored: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from numba.core import config

    restored.setattr(config, "CACHE_DIR", str(tmp_path / "numba-own"))
    kernels.compile_kernels()
    assert str(tmp_path / "numba-own") == config.CACHE_DIR


def test_small_work_stays_plain_python(restored: pytest.MonkeyPatch) -> None:
    kernels._prepare(kernels.COMPILE_ABOVE_REQUESTS)
    assert kernels._compiled is False
    kernels._prepare(kernels.COMPILE_ABOVE_REQUESTS + 1)
    assert kernels._compiled is True


def test_kernel_marks_a_function_with_its_options_and_returns_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_KERNELS", list(kernels._KERNELS))
    count = len(kernels._KERNELS)

    def twice(x: int) -> int:
        return 2 * x

    assert kernels.kernel(inline="always", fastmath=True)(twice) is twice
    assert kernels._KERNELS[count:] == [(twice, {"inline": "always", "fastmath": True})]


def test_cache_stats_count_what_each_run_kernel_compiled_and_loaded(restored: pytest.MonkeyPatch) -> None:
    """The first run of a kernel compiles it (one cache miss, written to the on-disk cache under
    the test's tmp dir); a fresh dispatcher, as in a new process, loads it (one hit). Kernels
    that never ran are not listed."""
    ptr, items = np.array([0, 2, 3, 5]), np.array([0, 1, 0, 1, 0])
    # events {0, 1}, {0}, {0, 1}: the next event of each request's object, by hand
    expected = [1, 2, 2, kernels.NEVER, kernels.NEVER]
    kernels.compile_kernels()
    assert kernels.cache_stats() == {}  # dispatchers compile lazily: nothing ran yet
    assert (
        kernels._next_use_events(ptr, items, 2, np.empty(5, dtype=np.int64), kernels.NEVER).tolist()
        == expected
    )
    assert kernels.cache_stats() == {"_next_use_events": (0, 1)}
    _as_plain_python(restored)
    kernels.compile_kernels()
    assert (
        kernels._next_use_events(ptr, items, 2, np.empty(5, dtype=np.int64), kernels.NEVER).tolist()
        == expected
    )
    assert kernels.cache_stats() == {"_next_use_events": (1, 0)}


def test_next_uses_are_32_bit_while_every_event_index_fits_below_never32() -> None:
    """The boundary, on zero-stride ptr arrays of the event counts around it (nothing allocated)."""

    def ptr_of(n_events: int) -> np.ndarray:
        return np.broadcast_to(np.int64(0), (n_events + 1,))

    assert kernels.next_use_type(ptr_of(0)) == (np.int32, kernels.NEVER32)
    assert kernels.next_use_type(ptr_of(kernels.NEVER32 - 1)) == (np.int32, kernels.NEVER32)
    assert kernels.next_use_type(ptr_of(kernels.NEVER32)) == (np.int64, kernels.NEVER)
    ptr, items = np.array([0, 2, 3, 5]), np.array([0, 1, 0, 1, 0])
    next_use = kernels.next_use_events(ptr, items, 2)
    assert next_use.dtype == np.int32 and next_use.tolist() == [1, 2, 2, kernels.NEVER32, kernels.NEVER32]


# --- trace_events and its pools, worked by hand ---------------------------------------------

# (step, layer, ids) of a 4-expert trace, k=2, MoE layers 1 and 3 (blocks 0 and 2 dense):
# two tokens of step 0 at layer 1 share expert 2; step 2 has no layer-1 row.
HAND_ROWS = [(0, 1, (0, 2)), (0, 1, (2, 3)), (0, 3, (1, 0)), (1, 1, (3, 1)), (1, 3, (2, 3)), (2, 3, (0, 1))]


def _hand_trace(rows_in: list[tuple[int, int, tuple[int, int]]]) -> Trace:
    rows = np.zeros(len(rows_in), dtype=row_dtype(2, False))
    for i, (step, layer, ids) in enumerate(rows_in):
        rows[i]["step"], rows[i]["layer"], rows[i]["kind"], rows[i]["ids"] = step, layer, int(step > 0), ids
    header = {
        "format": "moetrace",
        "version": 1,
        "n_layers": 4,
        "moe_layers": [1, 3],
        "n_experts": 4,
        "n_expert_used": 2,
        "has_weights": False,
    }
    return Trace(header=header, rows=rows)


def _as_lists(stream: EventStream) -> dict[str, object]:
    return {
        "ptr": stream.ptr.tolist(),
        "items": stream.items.tolist(),
        "step": stream.step.tolist(),
        "layer_index": stream.layer_index.tolist(),
        "n_objects": stream.n_objects,
        "n_layers": stream.n_layers,
    }


def test_trace_events_of_a_hand_trace() -> None:
    """One event per (step, MoE layer), its tokens' experts' union ascending; global object =
    layer index x 4 + expert (layer 3 is index 1)."""
    events = trace_events(_hand_trace(HAND_ROWS))
    assert _as_lists(events.stream) == {
        "ptr": [0, 3, 5, 7, 9, 11],
        "items": [0, 2, 3, 4, 5, 1, 3, 6, 7, 4, 5],
        "step": [0, 0, 1, 1, 2],
        "layer_index": [0, 1, 0, 1, 1],
        "n_objects": 8,
        "n_layers": 2,
    }
    assert (events.n_experts, events.moe_layers) == (4, [1, 3])
    assert events.stream.n_events == 5 and events.stream.n_requests == 11
    assert events.stream.max_event_size() == 3
    assert events.stream.item_layer_index().tolist() == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1]


def test_per_layer_pools_of_a_hand_trace() -> None:
    events = trace_events(_hand_trace(HAND_ROWS))
    assert events.pools("global") == [events.stream]
    assert [_as_lists(p) for p in events.pools("per-layer")] == [
        {
            "ptr": [0, 3, 5],
            "items": [0, 2, 3, 1, 3],
            "step": [0, 1],
            "layer_index": [0, 0],
            "n_objects": 4,
            "n_layers": 2,
        },
        {
            "ptr": [0, 2, 4, 6],
            "items": [0, 1, 2, 3, 0, 1],
            "step": [0, 1, 2],
            "layer_index": [1, 1, 1],
            "n_objects": 4,
            "n_layers": 2,
        },
    ]
    with pytest.raises(ConfigError, match=r"^scope must be one of per-layer, global, got 'both'$"):
        events.pools("both")


def test_single_item_stream_of_a_hand_trace() -> None:
    flat = single_item_stream(trace_events(_hand_trace(HAND_ROWS)).stream)
    assert _as_lists(flat) == {
        "ptr": list(range(12)),
        "items": [0, 2, 3, 4, 5, 1, 3, 6, 7, 4, 5],
        "step": [0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2],
        "layer_index": [0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1],
        "n_objects": 8,
        "n_layers": 2,
    }
    assert flat.max_event_size() == 1


def test_events_of_a_trace_without_rows_and_of_one_row() -> None:
    empty = trace_events(_hand_trace([])).stream
    assert _as_lists(empty) == {
        "ptr": [0],
        "items": [],
        "step": [],
        "layer_index": [],
        "n_objects": 8,
        "n_layers": 2,
    }
    assert empty.max_event_size() == 0 and empty.n_events == 0
    one = trace_events(_hand_trace([(0, 3, (3, 1))])).stream
    assert _as_lists(one)["items"] == [5, 7] and one.max_event_size() == 2


def test_sorted_distinct_is_np_unique() -> None:
    for values in ([], [5], [3, 1, 3, 2, 1], [2, 2], [9, 8, 7]):
        array = np.array(values, dtype=np.int64)
        assert sorted_distinct(array).tolist() == np.unique(array).tolist()


def test_event_arrays_have_their_types_whatever_the_row_types() -> None:
    """The kernels are compiled for integer arrays of these types (a float lookup table would
    turn every id into a float that compares equal and replays differently, or not at all):
    2 bytes a request (up to SMALL_OBJECTS objects), 64-bit offsets, the rows' 32-bit steps,
    16-bit layer indices."""
    for stream in [
        trace_events(_hand_trace(HAND_ROWS)).stream,
        *trace_events(_hand_trace(HAND_ROWS)).pools("per-layer"),
    ]:
        assert [a.dtype for a in (stream.ptr, stream.items, stream.step, stream.layer_index)] == [
            np.dtype(np.int64),
            np.dtype(np.uint16),
            np.dtype(np.uint32),
            np.dtype(np.int16),
        ]


def test_a_moe_layer_without_rows_gets_an_empty_per_layer_pool() -> None:
    """Only layer 1 routed anything: layer 3's pool exists and is empty (one pool per MoE layer)."""
    events = trace_events(_hand_trace([(0, 1, (0, 2)), (1, 1, (3, 1))]))
    first, second = events.pools("per-layer")
    assert (first.ptr.tolist(), first.items.tolist()) == ([0, 2, 4], [0, 2, 1, 3])
    assert (second.ptr.tolist(), second.items.tolist(), second.n_events) == ([0], [], 0)


def _hand_stream(events: list[list[int]], n_objects: int) -> EventStream:
    ptr = np.concatenate(([0], np.cumsum([len(e) for e in events]))).astype(np.int64)
    n = len(events)
    return EventStream(
        ptr=ptr,
        items=np.array([x for e in events for x in e], dtype=np.int64),
        step=np.arange(n, dtype=np.int64),
        layer_index=np.zeros(n, dtype=np.int64),
        n_objects=n_objects,
        n_layers=1,
    )


def test_belady_passes_over_a_pinned_furthest_expert() -> None:
    """Capacity 2. At event 1, expert 1 (hit, never needed again) is the furthest resident
    but pinned by the event, so 2's miss evicts 0 (needed at event 2); at event 2 the cache
    holds 1 (never again) and 2 (needed at event 3): 1 goes, and event 3 hits 2."""
    stream = _hand_stream([[0, 1], [1, 2], [0], [2]], 4)
    assert pool_hits(stream, kernels.BELADY, 2, None, None).tolist() == [0, 0, 1, 0, 0, 1]


def test_belady_keeps_an_oversized_events_highest_ids_and_evicts_furthest_first() -> None:
    """Capacity 2: event 0 streams 0, 1, 2 and keeps 1 and 2; 3's miss evicts 2 (never needed
    again) over 1 (needed at event 2); at event 3, 1 (never again) goes before 3 (event 4)."""
    stream = _hand_stream([[0, 1, 2], [3], [1], [0], [3]], 4)
    assert pool_hits(stream, kernels.BELADY, 2, None, None).tolist() == [0, 0, 0, 0, 1, 0, 1]


def test_belady_breaks_a_tie_in_next_use_by_the_lower_id() -> None:
    """Capacity 2: 0 and 1 are both needed next at event 3, so 2's miss evicts 0, the lower
    id, and event 3 misses 0 and hits 1."""
    stream = _hand_stream([[0], [1], [2], [0, 1]], 3)
    assert pool_hits(stream, kernels.BELADY, 2, None, None).tolist() == [0, 0, 0, 0, 1]


@pytest.mark.parametrize("policy", ["lru", "lfu", "belady"])
def test_over_small_objects_ids_are_int32_and_replay_as_the_reference(policy: str) -> None:
    """300 MoE layers x 256 experts is over SMALL_OBJECTS: ids take 4 bytes, and the engine
    still replays exactly as the reference (the compiled path: above COMPILE_ABOVE_REQUESTS)."""
    trace = synth_trace(
        TraceSynthSpec(n_layers=300, n_experts=256, k=2, n_prompt=8, n_ubatch=8, n_decode=40, seed=5)
    )
    stream = trace_events(trace).stream
    assert stream.n_objects == 300 * 256 > SMALL_OBJECTS
    assert stream.items.dtype == np.dtype(np.int32) and stream.n_requests > kernels.COMPILE_ABOVE_REQUESTS
    code = kernels.CODES[policy]
    assert pool_hits(stream, code, 64, None, None).tolist() == reference_hits(policy, stream, 64)


# --- trace_events in chunks, with the rows' last occurrences (after-event admission) ---------

# where each request of HAND_ROWS last occurs, as row * k + slot, in event order: event 0's
# expert 2 last at row 1 slot 0 (2); layer 3's step-0 row lists (1, 0), so its sorted items
# [4, 5] last occur at slots 5 and 4; step 1's layer-1 row lists (3, 1): [7, 6]
HAND_LAST_ROW_SLOT = [0, 2, 3, 5, 4, 7, 6, 8, 9, 10, 11]


def test_row_order_events_record_each_requests_last_row_slot() -> None:
    events = trace_events(_hand_trace(HAND_ROWS), row_order=True)
    stream = events.stream
    assert stream.last_row_slot is not None and stream.last_row_slot.dtype == np.dtype(np.int64)
    assert stream.last_row_slot.tolist() == HAND_LAST_ROW_SLOT
    assert _as_lists(stream) == _as_lists(trace_events(_hand_trace(HAND_ROWS)).stream)
    assert trace_events(_hand_trace(HAND_ROWS)).stream.last_row_slot is None
    # a per-layer pool keeps its requests' slots
    first, second = events.pools("per-layer")
    assert first.last_row_slot is not None and first.last_row_slot.tolist() == [0, 2, 3, 7, 6]
    assert second.last_row_slot is not None and second.last_row_slot.tolist() == [5, 4, 8, 9, 10, 11]
    # each step's kind (prompt 0, decode 1), 64-bit, one per step
    assert events.step_kind.dtype == np.dtype(np.int64) and events.step_kind.tolist() == [0, 1, 1]
    assert trace_events(_hand_trace([])).step_kind.tolist() == []


@pytest.mark.parametrize("chunk_rows", [1, 2, 3, 4, 5, 6])
def test_events_do_not_depend_on_where_the_rows_are_cut(chunk_rows: int) -> None:
    """Rows are grouped a chunk at a time, each chunk extended to its group's end: any chunk
    size gives the events, offsets, steps, kinds and last slots of one pass over all rows."""
    for trace in (_hand_trace(HAND_ROWS), synth_trace(SPECS[0])):
        whole = trace_events(trace, row_order=True, chunk_rows=len(trace.rows) + 1)
        cut = trace_events(trace, row_order=True, chunk_rows=chunk_rows)
        assert _as_lists(cut.stream) == _as_lists(whole.stream)
        assert cut.stream.last_row_slot is not None and whole.stream.last_row_slot is not None
        assert cut.stream.last_row_slot.tolist() == whole.stream.last_row_slot.tolist()
        assert cut.step_kind.tolist() == whole.step_kind.tolist()
    hand = trace_events(_hand_trace(HAND_ROWS), row_order=True, chunk_rows=chunk_rows).stream
    assert hand.ptr.tolist() == [0, 3, 5, 7, 9, 11]
    assert hand.last_row_slot is not None and hand.last_row_slot.tolist() == HAND_LAST_ROW_SLOT


def test_a_chunk_of_no_rows_is_refused() -> None:
    with pytest.raises(ValueError, match="^chunk_rows is 0: a chunk holds at least one row$"):
        trace_events(_hand_trace(HAND_ROWS), chunk_rows=0)


def test_object_ids_take_two_bytes_up_to_small_objects_inclusive() -> None:
    assert item_type(SMALL_OBJECTS) is np.uint16
    assert item_type(SMALL_OBJECTS + 1) is np.int32


def test_next_use_of_a_small_stream_is_32_bit() -> None:
    stream = trace_events(_hand_trace(HAND_ROWS)).stream
    next_use = kernels.next_use_events(stream.ptr, stream.items, stream.n_objects)
    assert next_use.dtype == np.dtype(np.int32) and len(next_use) == stream.n_requests


def test_single_item_offsets_are_64_bit() -> None:
    flat = single_item_stream(trace_events(_hand_trace(HAND_ROWS)).stream)
    assert flat.ptr.dtype == np.dtype(np.int64)
