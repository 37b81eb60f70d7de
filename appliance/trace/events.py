"""Turn trace rows into cache events: one event per (step, MoE layer), its experts' union.

Events are held in CSR form: event e requests `items[ptr[e]:ptr[e+1]]`, ascending and
distinct. A pool is one cache: per-layer scope has one pool per MoE layer (object = expert
id), global scope one pool (object = layer index * n_experts + expert id).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from appliance.core.errors import ConfigError
from appliance.trace.format import ROW_CHUNK, Trace, release_rows
from appliance.trace.names import SCOPES

# Event arrays' types: an object id fits 16 bits when there are at most SMALL_OBJECTS objects
# (every published MoE model's layers x experts), else 32 (format.MAX_OBJECTS); a layer index
# fits 16 bits (format.MAX_TRACE_LAYERS), a step is the row's own unsigned 32 bits; request
# offsets are 64-bit.
SMALL_OBJECTS = 1 << 16
LAYER_TYPE = np.int16
STEP_TYPE = np.uint32


def item_type(n_objects: int) -> type[np.integer]:
    """The type of a trace's object ids: 2 bytes a request up to SMALL_OBJECTS objects, else 4."""
    return np.uint16 if n_objects <= SMALL_OBJECTS else np.int32


@dataclass(frozen=True)
class EventStream:
    """The events one cache sees, in order."""

    ptr: np.ndarray  # int64, n_events + 1
    items: np.ndarray  # object ids, uint16 or int32 (item_type)
    step: np.ndarray  # uint32 (STEP_TYPE) per event: trace step
    layer_index: np.ndarray  # int16 (LAYER_TYPE) per event: position of its layer in moe_layers
    n_objects: int
    n_layers: int  # number of MoE layers (for layer-cycle aware policies)
    # per request: where its last occurrence in the event lies in the trace's rows (row x k +
    # slot: token-major, slot order), the tick of the `after-event` model; None when unknown
    last_row_slot: np.ndarray | None = None

    @property
    def n_events(self) -> int:
        return len(self.ptr) - 1

    @property
    def n_requests(self) -> int:
        return len(self.items)

    def item_layer_index(self) -> np.ndarray:
        """Layer index of every requested item."""
        return np.repeat(self.layer_index, np.diff(self.ptr))

    def max_event_size(self) -> int:
        return int(np.diff(self.ptr).max()) if self.n_events else 0


@dataclass(frozen=True)
class TraceEvents:
    """All events of a trace in evaluation order, objects numbered globally."""

    stream: EventStream
    n_experts: int
    moe_layers: list[int]
    step_kind: np.ndarray | None = None  # per trace step: KIND_PROMPT or KIND_DECODE

    def pools(self, scope: str) -> list[EventStream]:
        """The streams to replay: one per MoE layer (per-layer) or one for all (global)."""
        return list(self.iter_pools(scope))

    def iter_pools(self, scope: str) -> Iterator[EventStream]:
        """`pools`, built one at a time (a per-layer pool holds a copy of its layer's requests)."""
        if scope == "global":
            yield self.stream
            return
        if scope != "per-layer":
            raise ConfigError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        s = self.stream
        for j in range(len(self.moe_layers)):
            sel = np.flatnonzero(s.layer_index == j)
            sizes = s.ptr[sel + 1] - s.ptr[sel]
            ptr = np.zeros(len(sel) + 1, dtype=np.int64)
            np.cumsum(sizes, out=ptr[1:])
            picked = np.repeat(s.ptr[sel] - ptr[:-1], sizes) + np.arange(ptr[-1])
            yield EventStream(
                ptr=ptr,
                items=s.items[picked] - s.items.dtype.type(j * self.n_experts),
                step=s.step[sel],
                layer_index=s.layer_index[sel],
                n_objects=self.n_experts,
                n_layers=s.n_layers,
                last_row_slot=None if s.last_row_slot is None else s.last_row_slot[picked],
            )


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """np.unique's result via sort and a neighbour mask (np.unique is far slower on large input)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _group_end(rows: np.ndarray, stop: int) -> int:
    """The first row at or after `stop` (at least 1) that starts a new (step, layer) group."""
    while stop < len(rows) and (
        rows["step"][stop] == rows["step"][stop - 1] and rows["layer"][stop] == rows["layer"][stop - 1]
    ):
        stop += 1
    return stop


def trace_events(trace: Trace, row_order: bool = False, chunk_rows: int = ROW_CHUNK) -> TraceEvents:
    """Group rows by (step, layer) and take the union of their tokens' experts, ascending;
    `row_order` also records where each request last occurs in the rows (`after-event`).

    Rows are read `chunk_rows` at a time (`format.ROW_CHUNK`, cut at a group's end) and released
    after it, so what this holds is the events themselves: 2 bytes a request (4 over
    SMALL_OBJECTS objects), 14 an event.
    Every array is allocated for its bound (one event per row, k requests per row) and
    returned as a view of what was filled: pages never written are never resident."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows is {chunk_rows}: a chunk holds at least one row")
    rows = trace.rows
    n_experts = trace.n_experts
    layers = trace.moe_layers
    k = trace.k
    layer_lookup = np.full(max(layers) + 1, -1, dtype=np.int64)
    layer_lookup[layers] = np.arange(len(layers))
    n_rows = len(rows)
    n_obj = len(layers) * n_experts
    last_step = int(rows["step"][-1]) if n_rows else -1
    items = np.empty(n_rows * k, dtype=item_type(n_obj))
    ptr = np.zeros(n_rows + 1, dtype=np.int64)
    ev_step = np.empty(n_rows, dtype=STEP_TYPE)
    ev_layer = np.empty(n_rows, dtype=LAYER_TYPE)
    last_row_slot = np.empty(n_rows * k, dtype=np.int64) if row_order else None
    step_kind = np.zeros(last_step + 1, dtype=np.int64)
    n_events = n_requests = 0
    start = 0
    while start < n_rows:
        stop = _group_end(rows, min(start + chunk_rows, n_rows))
        chunk = rows[start:stop]
        step = chunk["step"].astype(np.int64)
        lidx = layer_lookup[chunk["layer"].astype(np.int64)]
        new_group = np.empty(len(chunk), dtype=bool)
        new_group[0] = True
        new_group[1:] = (step[1:] != step[:-1]) | (lidx[1:] != lidx[:-1])
        group = np.cumsum(new_group) - 1
        n_groups = int(group[-1]) + 1
        flat_keys = (
            group[:, None] * n_obj + lidx[:, None] * n_experts + chunk["ids"].astype(np.int64)
        ).ravel()
        if last_row_slot is not None:
            order = np.argsort(flat_keys, kind="stable")
            ordered = flat_keys[order]
            run_end = np.ones(len(ordered), dtype=bool)
            np.not_equal(ordered[1:], ordered[:-1], out=run_end[:-1])
            keys = ordered[run_end]  # = sorted_distinct(flat_keys), with where each key last occurs
            last_row_slot[n_requests : n_requests + len(keys)] = order[run_end] + start * k
        else:
            keys = sorted_distinct(flat_keys)
        items[n_requests : n_requests + len(keys)] = keys % n_obj
        np.cumsum(
            np.bincount(keys // n_obj, minlength=n_groups), out=ptr[n_events + 1 : n_events + 1 + n_groups]
        )
        ptr[n_events + 1 : n_events + 1 + n_groups] += n_requests
        ev_step[n_events : n_events + n_groups] = step[new_group]
        ev_layer[n_events : n_events + n_groups] = lidx[new_group]
        step_kind[step] = chunk["kind"]
        n_events += n_groups
        n_requests += len(keys)
        release_rows(rows, start, stop)
        start = stop
    stream = EventStream(
        ptr=ptr[: n_events + 1],
        items=items[:n_requests],
        step=ev_step[:n_events],
        layer_index=ev_layer[:n_events],
        n_objects=n_obj,
        n_layers=len(layers),
        last_row_slot=None if last_row_slot is None else last_row_slot[:n_requests],
    )
    return TraceEvents(stream=stream, n_experts=n_experts, moe_layers=layers, step_kind=step_kind)


def single_item_stream(stream: EventStream) -> EventStream:
    """The same requests, one per event (flattened in event order), for classic-cache checks."""
    n = stream.n_requests
    sizes = np.diff(stream.ptr)
    return EventStream(
        ptr=np.arange(n + 1, dtype=np.int64),
        items=stream.items,
        step=np.repeat(stream.step, sizes),
        layer_index=np.repeat(stream.layer_index, sizes),
        n_objects=stream.n_objects,
        n_layers=stream.n_layers,
    )
