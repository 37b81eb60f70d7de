"""Turn trace rows into cache events: one event per (step, MoE layer), its experts' union.

Events are held in CSR form: event e requests `items[ptr[e]:ptr[e+1]]`, ascending and
distinct. A pool is one cache: per-layer scope has one pool per MoE layer (object = expert
id), global scope one pool (object = layer index * n_experts + expert id).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from appliance.core.errors import ConfigError
from appliance.trace.format import KIND_DECODE, Trace
from appliance.trace.names import SCOPES


@dataclass(frozen=True)
class EventStream:
    """The events one cache sees, in order."""

    ptr: np.ndarray  # int64, n_events + 1
    items: np.ndarray  # int64 object ids
    step: np.ndarray  # int64 per event: trace step
    layer_index: np.ndarray  # int64 per event: position of its layer in moe_layers
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

    def decode_requests(self, pool: EventStream) -> np.ndarray:
        """Per request of a pool: whether its step is a decode step (all False when unknown)."""
        if self.step_kind is None:
            return np.zeros(pool.n_requests, dtype=bool)
        return np.repeat(self.step_kind[pool.step] == KIND_DECODE, np.diff(pool.ptr))

    def pools(self, scope: str) -> list[EventStream]:
        """The streams to replay: one per MoE layer (per-layer) or one for all (global)."""
        if scope == "global":
            return [self.stream]
        if scope != "per-layer":
            raise ConfigError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        s = self.stream
        sizes = np.diff(s.ptr)
        n_layers = len(self.moe_layers)
        item_order = np.argsort(s.item_layer_index(), kind="stable")
        item_bounds = np.concatenate(
            ([0], np.cumsum(np.bincount(s.layer_index, weights=sizes, minlength=n_layers)))
        )
        event_order = np.argsort(s.layer_index, kind="stable")
        event_bounds = np.concatenate(([0], np.cumsum(np.bincount(s.layer_index, minlength=n_layers))))
        out = []
        for j in range(n_layers):
            sel = event_order[event_bounds[j] : event_bounds[j + 1]]
            picked = item_order[int(item_bounds[j]) : int(item_bounds[j + 1])]
            ptr = np.zeros(len(sel) + 1, dtype=np.int64)
            np.cumsum(sizes[sel], out=ptr[1:])
            out.append(
                EventStream(
                    ptr=ptr,
                    items=s.items[picked] - j * self.n_experts,
                    step=s.step[sel],
                    layer_index=s.layer_index[sel],
                    n_objects=self.n_experts,
                    n_layers=s.n_layers,
                    last_row_slot=None if s.last_row_slot is None else s.last_row_slot[picked],
                )
            )
        return out


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """np.unique's result via sort and a neighbour mask (np.unique is far slower on large input)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def trace_events(trace: Trace, row_order: bool = False) -> TraceEvents:
    """Group rows by (step, layer) and take the union of their tokens' experts, ascending;
    `row_order` also records where each request last occurs in the rows (`after-event`)."""
    rows = trace.rows
    n_experts = trace.n_experts
    layers = trace.moe_layers
    layer_lookup = np.full(max(layers) + 1, -1, dtype=np.int64)
    layer_lookup[layers] = np.arange(len(layers))
    n_rows = len(rows)
    step = rows["step"].astype(np.int64)
    lidx = layer_lookup[rows["layer"].astype(np.int64)]
    if n_rows:
        new_group = np.empty(n_rows, dtype=bool)
        new_group[0] = True
        new_group[1:] = (step[1:] != step[:-1]) | (lidx[1:] != lidx[:-1])
        group = np.cumsum(new_group) - 1
        group_step = step[new_group]
        group_lidx = lidx[new_group]
    else:
        group = np.zeros(0, dtype=np.int64)
        group_step = group_lidx = np.zeros(0, dtype=np.int64)
    n_groups = len(group_step)
    obj = lidx[:, None] * n_experts + rows["ids"].astype(np.int64)
    n_obj = len(layers) * n_experts
    flat_keys = (group[:, None] * n_obj + obj).ravel()
    last_row_slot = None
    if row_order:
        order = np.argsort(flat_keys, kind="stable")
        ordered = flat_keys[order]
        run_end = np.ones(len(ordered), dtype=bool)
        np.not_equal(ordered[1:], ordered[:-1], out=run_end[:-1])
        keys = ordered[run_end]  # = sorted_distinct(flat_keys), with where each key last occurs
        last_row_slot = order[run_end].astype(np.int64)
    else:
        keys = sorted_distinct(flat_keys)
    ev = keys // n_obj
    items = keys % n_obj
    ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(ev, minlength=n_groups), out=ptr[1:])
    stream = EventStream(
        ptr=ptr,
        items=items,
        step=group_step,
        layer_index=group_lidx,
        n_objects=n_obj,
        n_layers=len(layers),
        last_row_slot=last_row_slot,
    )
    step_kind = np.zeros(int(step.max()) + 1 if n_rows else 0, dtype=np.int64)
    step_kind[step] = rows["kind"]
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
