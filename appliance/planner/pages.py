"""Which pages of the model file a run brings into memory: the planner's page model.

Without demand mmap llama.cpp maps and populates the whole file, so every page of every tensor
is resident. With demand mmap (patch 0002, `LLAMA_MMAP_DEMAND=1`) the file is mapped without
populating it and with random-access advice, so the kernel reads exactly the 4 KiB pages a
computation touches: each page of a tensor every token uses (attention, norms, routers, shared
experts, the output head), of the token embeddings only the rows of the tokens looked up (at
most `tokens` of them, each row's pages counted whole: at most ceil(row / page) + 1; the whole
table when it is also the output head, tied, or when the count is unknown), and of a routed
expert tensor only the slices of the experts the router chose. At a 248,320-token vocabulary
the table is 540 MB, of which a 28-token run reads a few hundred KiB.
The header is read with read(2) into the page cache, which the cgroup charges the same way.
A slice seldom starts or ends on a page boundary, so pages are counted as the union of the
page-rounded byte ranges, never as bytes. The engine's expert cache (patch 0004) drops the whole
pages of every expert it evicts; which experts it holds at most is `planner.cache_pages`.
With a device, llama.cpp copies each tensor placed there out of the mapping at load, reading its
pages; under demand mmap the tracer (patch 0001) drops them after the load, all but the partial
pages a tensor shares with a host neighbour, so a demand-mapped run holds them only while it
loads (`device_file_bytes`), and without demand mmap they stay like every other page.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from appliance.core.units import PAGE_BYTES
from appliance.planner.accounting import Accounting, TensorBytes
from appliance.planner.offload import Offload
from appliance.trace.expert_bytes import expert_slice_bytes

DEMAND_ENV = "LLAMA_MMAP_DEMAND"  # patch 0002's switch: "1" maps the model on demand
TOKEN_EMBEDDING = "token_embd.weight"  # read by row (get_rows) for each token looked up
OUTPUT_TENSOR = "output.weight"  # the output head; without it llama.cpp ties it to TOKEN_EMBEDDING


def is_demand_mapped(environment: dict[str, str] | None) -> bool:
    """Whether an engine environment maps the model on demand (patch 0002's exact test)."""
    return (environment or {}).get(DEMAND_ENV) == "1"


def _page_union_bytes(ranges: Iterable[tuple[int, int]]) -> int:
    """Bytes of the pages that the byte ranges [start, end) touch, each page counted once."""
    pages = sorted((start // PAGE_BYTES, -(-end // PAGE_BYTES)) for start, end in ranges if end > start)
    total, reach = 0, 0
    for first, stop in pages:
        first = max(first, reach)
        if stop > first:
            total += stop - first
            reach = stop
    return total * PAGE_BYTES


def embedding_rows_bytes(tensor: TensorBytes, tokens: int) -> int:
    """Bytes of the pages that the rows of at most `tokens` tokens of an embedding table touch:
    each row's pages counted whole, never more than the table's own pages."""
    rows = max(int(tensor.shape[-1]), 1)  # a GGUF tensor has at least one dimension
    row_pages = -(-(tensor.nbytes // rows) // PAGE_BYTES) + 1
    table_pages = -(-tensor.nbytes // PAGE_BYTES) + 1
    return min(table_pages, tokens * row_pages) * PAGE_BYTES


def _tied_output(acc: Accounting) -> bool:
    """Whether the output head is the token embedding table (no `output.weight` of its own)."""
    return not any(t.name == OUTPUT_TENSOR for t in acc.tensors)


def _edge_ranges(start: int, end: int) -> list[tuple[int, int]]:
    """The parts of [start, end) on its partial first and last pages: what stays of a range whose
    whole pages were dropped."""
    return [
        (start, min(end, -(-start // PAGE_BYTES) * PAGE_BYTES)),
        (max(start, end // PAGE_BYTES * PAGE_BYTES), end),
    ]


def device_file_bytes(acc: Accounting, offload: Offload) -> int:
    """Bytes of the file's pages that the tensors placed on the device cover: what their upload
    reads through the mapping."""
    return _page_union_bytes((t.offset, t.offset + t.nbytes) for t in offload.tensors(acc))


def resident_file_bytes(
    acc: Accounting,
    experts: Iterable[tuple[int, int]] | None = None,
    tokens: int | None = None,
    held: Collection[tuple[int, int]] | None = None,
    offload: Offload | None = None,
) -> int:
    """Bytes of the model file's pages a run holds: the header and every tensor, or with
    `experts` (the (layer, expert) pairs a demand-mapped run's router chose) every non-expert
    tensor and only those experts' slices of each routed expert tensor, and with `tokens` as
    well (the tokens it looked up, at most) only their rows of an untied token embedding.
    With `held` (the experts the engine's expert cache holds, `planner.cache_pages`) only those
    of the chosen experts count whole: the cache drops the whole pages of an expert it evicts,
    so of the others only the pages their slices share with a neighbour stay. With `offload` as
    well (a demand-mapped run with a device) the device's tensors keep only their edge pages."""
    chosen: dict[int, set[int]] | None = None
    if experts is not None:
        chosen = {}
        for layer, expert in experts:
            chosen.setdefault(int(layer), set()).add(int(expert))
    rows_only = chosen is not None and tokens is not None and not _tied_output(acc)
    ranges = [(0, acc.header_bytes)]
    extra = 0
    for tensor in acc.tensors:
        if chosen is not None and offload is not None and offload.on_device(tensor.layer, tensor.group):
            ranges += _edge_ranges(tensor.offset, tensor.offset + tensor.nbytes)
            continue
        if rows_only and tensor.name == TOKEN_EMBEDDING:
            extra += embedding_rows_bytes(tensor, int(tokens or 0))
            continue
        if chosen is None or tensor.group != "routed_experts":
            ranges.append((tensor.offset, tensor.offset + tensor.nbytes))
            continue
        one = expert_slice_bytes(tensor.name, tensor.shape, tensor.nbytes, acc.facts.experts, acc.source)
        for expert in chosen.get(tensor.layer, ()):
            start = tensor.offset + expert * one
            end = start + one
            if held is None or (tensor.layer, expert) in held:
                ranges.append((start, end))
            else:  # evicted: its partial first and last pages stay
                ranges += _edge_ranges(start, end)
    return _page_union_bytes(ranges) + extra
