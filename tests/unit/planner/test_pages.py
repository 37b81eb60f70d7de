"""The page model: which pages of a GGUF a run holds, checked against a layout worked out by
hand and against page sets built another way (a set of page numbers from gguf's own reader)."""

import dataclasses
from pathlib import Path

import pytest
from gguf import GGUFReader

from appliance.core.errors import ApplianceError
from appliance.core.units import PAGE_BYTES
from appliance.planner.accounting import TensorBytes, account_file
from appliance.planner.offload import Offload
from appliance.planner.pages import (
    device_file_bytes,
    embedding_rows_bytes,
    is_demand_mapped,
    resident_file_bytes,
)
from appliance.planner.plan import RPC, PlanLimits, make_plan, page_table_bytes, predicted_peak_bytes
from tests.models import tiny_model


@pytest.fixture(scope="module")
def model() -> Path:
    return tiny_model("qwen3moe")


def _pages(start: int, end: int) -> set[int]:
    return set(range(start // PAGE_BYTES, (end + PAGE_BYTES - 1) // PAGE_BYTES))


def test_a_layout_worked_out_by_hand(model: Path) -> None:
    acc = account_file(model)
    tensors = [
        TensorBytes("token_embd.weight", "F16", (4, 25), 200, 4000, "embeddings", -1),  # pages 0, 1
        TensorBytes("blk.0.ffn_up_exps.weight", "F16", (2, 1500, 3), 18000, 8192, "routed_experts", 0),
        TensorBytes("blk.0.attn_q.weight", "F16", (2, 2), 8, 4090, "attention_ssm", 0),  # pages 0, 1
    ]
    hand = dataclasses.replace(acc, header_bytes=100, tensors=tensors)  # header: page 0
    # expert 1 of the routed tensor is bytes [14192, 20192): pages 3 and 4
    assert resident_file_bytes(hand, [(0, 1)]) == 4 * PAGE_BYTES
    # expert 0 is [8192, 14192): pages 2 and 3; expert 2 is [20192, 26192): pages 4, 5 and 6
    assert resident_file_bytes(hand, [(0, 0), (0, 2)]) == 7 * PAGE_BYTES
    assert resident_file_bytes(hand, [(0, 0), (0, 0), (0, 2)]) == 7 * PAGE_BYTES  # chosen twice
    assert resident_file_bytes(hand, [(1, 1)]) == 2 * PAGE_BYTES  # another layer's expert: none here
    assert resident_file_bytes(hand, []) == 2 * PAGE_BYTES
    assert resident_file_bytes(hand) == 7 * PAGE_BYTES  # pages 0 to 6, without a router's choice


def test_the_expert_cache_holds_its_experts_whole_and_only_the_shared_pages_of_the_others(
    model: Path,
) -> None:
    acc = account_file(model)
    tensors = [
        TensorBytes("blk.0.attn_q.weight", "F16", (2, 2), 8, 4090, "attention_ssm", 0),  # pages 0, 1
        TensorBytes("blk.0.ffn_up_exps.weight", "F16", (2, 1500, 3), 18000, 8192, "routed_experts", 0),
    ]
    hand = dataclasses.replace(acc, header_bytes=100, tensors=tensors)
    chosen = [(0, 0), (0, 1), (0, 2)]
    # expert 0 [8192, 14192): page 2 is its own, page 3 shared; expert 2 [20192, 26192): page 5
    # its own, pages 4 and 6 partial; expert 1 held whole: pages 3 and 4
    assert resident_file_bytes(hand, chosen, held={(0, 1)}) == 5 * PAGE_BYTES  # pages 0, 1, 3, 4, 6
    assert resident_file_bytes(hand, chosen, held=set()) == 5 * PAGE_BYTES  # the same edges stay
    assert resident_file_bytes(hand, chosen, held={(0, 0)}) == 6 * PAGE_BYTES  # 0 to 4 and 6
    assert resident_file_bytes(hand, chosen, held=set(chosen)) == resident_file_bytes(hand, chosen)
    assert resident_file_bytes(hand, chosen, held={(1, 0)}) == 5 * PAGE_BYTES  # not chosen: no page
    aligned = TensorBytes("blk.0.ffn_up_exps.weight", "F16", (2, 1024, 3), 12288, 8192, "routed_experts", 0)
    page_aligned = dataclasses.replace(hand, tensors=[aligned])
    assert resident_file_bytes(page_aligned, chosen, held=set()) == PAGE_BYTES  # the header's page only


def test_only_the_rows_looked_up_of_an_untied_embedding_are_held(model: Path) -> None:
    acc = account_file(model)
    # 8 rows of 4000 bytes: each row's pages counted whole (2 a row, a row may straddle a page
    # boundary), never more than the table's own 9 (7.8 pages, rounded up, plus one)
    embedding = TensorBytes("token_embd.weight", "F16", (2000, 8), 32000, 8192, "embeddings", -1)
    tensors = [
        embedding,  # [8192, 40192): pages 2 to 9
        TensorBytes("output.weight", "F16", (2000, 8), 32000, 40960, "output", -1),  # pages 10 to 17
        TensorBytes("blk.0.ffn_up_exps.weight", "F16", (2, 1500, 3), 18000, 81920, "routed_experts", 0),
    ]
    hand = dataclasses.replace(acc, header_bytes=100, tensors=tensors)
    # header page 0, the output head's 8 pages, expert 1 = [87920, 93920): pages 21 and 22
    assert resident_file_bytes(hand, [(0, 1)], tokens=0) == 11 * PAGE_BYTES
    assert resident_file_bytes(hand, [(0, 1)], tokens=1) == (11 + 2) * PAGE_BYTES
    assert resident_file_bytes(hand, [(0, 1)], tokens=4) == (11 + 8) * PAGE_BYTES
    assert resident_file_bytes(hand, [(0, 1)], tokens=5) == (11 + 9) * PAGE_BYTES  # the table's bound
    assert resident_file_bytes(hand, [(0, 1)]) == (11 + 8) * PAGE_BYTES  # no token count: the whole table
    tied = dataclasses.replace(hand, tensors=[embedding, tensors[2]])  # the head reads every row
    assert resident_file_bytes(tied, [(0, 1)], tokens=1) == (1 + 8 + 2) * PAGE_BYTES
    counts = [embedding_rows_bytes(embedding, tokens) for tokens in (0, 1, 4, 5, 100)]
    assert counts == [0, 2 * PAGE_BYTES, 8 * PAGE_BYTES, 9 * PAGE_BYTES, 9 * PAGE_BYTES]
    assert all(type(count) is int for count in counts)


def test_embedding_rows_of_a_one_row_and_a_one_dimensional_table() -> None:
    one_row = TensorBytes("token_embd.weight", "F16", (6144, 1), 12288, 0, "embeddings", -1)
    assert embedding_rows_bytes(one_row, 1) == 4 * PAGE_BYTES  # 3 pages, plus one for straddling
    flat = TensorBytes("token_embd.weight", "F32", (4,), 16, 0, "embeddings", -1)  # 4 rows of 4 bytes
    assert embedding_rows_bytes(flat, 1) == 2 * PAGE_BYTES


def test_an_empty_tensor_holds_no_page(model: Path) -> None:
    acc = account_file(model)
    tensors = [TensorBytes("rope_freqs.weight", "F32", (0,), 0, 3 * PAGE_BYTES + 10, "other", -1)]
    hand = dataclasses.replace(acc, header_bytes=100, tensors=tensors)
    assert resident_file_bytes(hand) == PAGE_BYTES  # the header's page 0 only


def test_a_one_byte_header_holds_page_zero(model: Path) -> None:
    acc = account_file(model)
    tensors = [TensorBytes("token_embd.weight", "F32", (4,), 16, PAGE_BYTES, "embeddings", -1)]
    hand = dataclasses.replace(acc, header_bytes=1, tensors=tensors)
    assert resident_file_bytes(hand) == 2 * PAGE_BYTES  # pages 0 and 1


def test_a_two_dimensional_routed_tensor_splits_by_the_models_expert_count(model: Path) -> None:
    acc = account_file(model)
    tensors = [TensorBytes("blk.0.ffn_up_exps.weight", "F16", (2, 3000), 12000, 8192, "routed_experts", 0)]
    hand = dataclasses.replace(
        acc, header_bytes=100, tensors=tensors, facts=dataclasses.replace(acc.facts, experts=4)
    )
    # one expert is 12000 / 4 = 3000 bytes; expert 2 is [14192, 17192): pages 3 and 4
    assert resident_file_bytes(hand, [(0, 2)]) == 3 * PAGE_BYTES
    # expert 0 is [8192, 11192): page 2 only
    assert resident_file_bytes(hand, [(0, 0)]) == 2 * PAGE_BYTES


def test_a_routed_tensor_of_no_experts_is_refused_by_name(model: Path) -> None:
    acc = account_file(model)
    tensors = [TensorBytes("blk.0.ffn_up_exps.weight", "F16", (2, 3, 0), 0, 8192, "routed_experts", 0)]
    hand = dataclasses.replace(acc, source="m.gguf", header_bytes=100, tensors=tensors)
    with pytest.raises(ApplianceError, match=r"^m\.gguf: corrupt GGUF header: routed expert") as refused:
        resident_file_bytes(hand, [(0, 0)])
    assert str(refused.value) == (
        "m.gguf: corrupt GGUF header: routed expert tensor 'blk.0.ffn_up_exps.weight' "
        "has shape [2, 3, 0], 0 experts"
    )


def test_the_whole_file_is_every_page_of_header_and_tensors(model: Path) -> None:
    reader = GGUFReader(model)
    pages = _pages(0, min(int(t.data_offset) for t in reader.tensors))
    for tensor in reader.tensors:
        pages |= _pages(int(tensor.data_offset), int(tensor.data_offset) + int(tensor.n_bytes))
    assert resident_file_bytes(account_file(model)) == len(pages) * PAGE_BYTES


def test_a_demand_mapped_run_holds_only_the_chosen_experts_slices(model: Path) -> None:
    reader = GGUFReader(model)
    chosen = {(0, 1), (0, 7), (2, 3)}
    pages = _pages(0, min(int(t.data_offset) for t in reader.tensors))
    for tensor in reader.tensors:
        start, size = int(tensor.data_offset), int(tensor.n_bytes)
        name = tensor.name
        if "_exps" not in name:
            pages |= _pages(start, start + size)
            continue
        layer = int(name.split(".")[1])
        one = size // int(tensor.shape[-1])  # gguf lists the expert dimension last
        for chosen_layer, expert in chosen:
            if chosen_layer == layer:
                pages |= _pages(start + expert * one, start + (expert + 1) * one)
    acc = account_file(model)
    demand = resident_file_bytes(acc, sorted(chosen))
    assert demand == len(pages) * PAGE_BYTES
    assert demand < resident_file_bytes(acc)


@pytest.mark.parametrize(
    ("environment", "demand"),
    [
        ({"LLAMA_MMAP_DEMAND": "1"}, True),
        ({"LLAMA_MMAP_DEMAND": "0"}, False),
        ({"LLAMA_MMAP_DEMAND": "yes"}, False),
        ({}, False),
        (None, False),
    ],
)
def test_demand_mapping_is_patch_0002s_exact_switch(environment: dict[str, str] | None, demand: bool) -> None:
    assert is_demand_mapped(environment) is demand


def _embedding_layout(model: Path, tied: bool) -> object:
    """A 248,320-row Q8_0 table of width 2048 (2,176 B a row, the Qwen3.5 shape's) at a page
    boundary after the header's page, and an output head of its own unless tied."""
    acc = account_file(model)
    table = 248_320 * 2_176
    tensors = [TensorBytes("token_embd.weight", "Q8_0", (2048, 248_320), table, PAGE_BYTES, "embeddings", -1)]
    if not tied:
        tensors.append(
            TensorBytes("output.weight", "Q8_0", (2048, 248_320), table, PAGE_BYTES + table, "output", -1)
        )
    return dataclasses.replace(acc, header_bytes=100, tensors=tensors)


def test_a_demand_mapped_run_reads_only_its_tokens_embedding_rows(model: Path) -> None:
    """A row of 2,176 B spans at most two pages, so 28 tokens hold at most 56 pages of a 540 MB
    table; the output head is read whole. Without a token count, or without a router's
    choice (every page mapped), the table counts whole."""
    hand = _embedding_layout(model, tied=False)
    table_pages = 248_320 * 2_176 // PAGE_BYTES  # exactly 131,920, from a page boundary
    head = 1 + table_pages  # the header's page and the output head's
    assert resident_file_bytes(hand, [], tokens=28) == (head + 28 * 2) * PAGE_BYTES
    assert resident_file_bytes(hand, []) == (1 + 2 * table_pages) * PAGE_BYTES
    assert resident_file_bytes(hand, tokens=28) == (1 + 2 * table_pages) * PAGE_BYTES
    # more tokens than rows' pages: never more than the table's own pages (plus one, for a
    # table that does not start on a page boundary)
    assert resident_file_bytes(hand, [], tokens=10**6) == (head + table_pages + 1) * PAGE_BYTES


def test_a_tied_output_head_reads_the_whole_embedding_table(model: Path) -> None:
    hand = _embedding_layout(model, tied=True)
    table_pages = 248_320 * 2_176 // PAGE_BYTES
    assert resident_file_bytes(hand, [], tokens=28) == (1 + table_pages) * PAGE_BYTES


def test_a_demand_mapped_run_with_a_device_keeps_only_the_edges_of_its_tensors() -> None:
    """By hand: a device tensor's pages are read at load (device_file_bytes) and dropped after
    it, all but the partial pages it shares with a host neighbour; its experts never count."""
    acc = account_file(tiny_model("qwen3moe"))
    tensors = [
        TensorBytes("blk.0.attn_q.weight", "F16", (2, 2), 5000, 100, "attention_ssm", 0),  # pages 0, 1
        TensorBytes("blk.1.attn_q.weight", "F16", (2, 2), 12000, 5100, "attention_ssm", 1),  # pages 1-4
        TensorBytes("blk.1.ffn_up_exps.weight", "F16", (2, 1500, 3), 18000, 20480, "routed_experts", 1),
    ]
    hand = dataclasses.replace(acc, header_bytes=100, tensors=tensors)
    layer_1 = Offload(first_device_layer=1, output_on_device=True, host_expert_layers=0)
    # layer 1 on the device: its attention's first page (1) is shared with layer 0, its last (4)
    # is partial, and so is its experts' last (9); their whole pages 5 to 8 are gone
    assert resident_file_bytes(hand, [(1, 0), (1, 2)], offload=layer_1) == 4 * PAGE_BYTES  # 0, 1, 4, 9
    assert resident_file_bytes(hand, [(1, 0), (1, 2)]) == 10 * PAGE_BYTES  # on the host: pages 0 to 9
    assert device_file_bytes(hand, layer_1) == 9 * PAGE_BYTES  # pages 1 to 9
    experts_home = Offload(first_device_layer=1, output_on_device=True, host_expert_layers=2)
    assert device_file_bytes(hand, experts_home) == 4 * PAGE_BYTES  # pages 1 to 4
    assert resident_file_bytes(hand, [(1, 0)], offload=experts_home) == 3 * PAGE_BYTES + 2 * PAGE_BYTES


def test_the_peak_with_a_device_is_the_load_or_the_run_whichever_holds_more() -> None:
    """On the stand-in the whole tiny model fits the device: a demand-mapped run holds, while it
    loads, every device tensor's pages and the RPC client's message of the last layer's largest
    tensor (more than the chosen experts' pages after it); without demand mmap, the whole file
    and the largest message."""
    acc = account_file(tiny_model("qwen3moe"))
    layers = acc.facts.layers
    chosen = [(layer, expert) for layer in range(layers) for expert in range(acc.facts.experts_used)]
    roomy = 1 << 30
    on_device = {"vram_bytes": roomy, "device": RPC}
    plan = make_plan(acc, PlanLimits(ram_bytes=roomy, ctx=64, n_ubatch=8, n_outputs=8, **on_device))
    assert plan.ngl == layers + 1 and plan.cpu_moe_layers == 0  # the whole model on the device
    whole = Offload.of_ngl(layers, plan.ngl, plan.cpu_moe_layers)
    loading = device_file_bytes(acc, whole)
    assert loading > resident_file_bytes(acc, chosen, 64, offload=whole)  # the load holds more
    last = max(t.nbytes for t in acc.tensors if t.layer == layers - 1)
    demand = predicted_peak_bytes(acc, roomy, ctx=64, prompt_tokens=8, experts=chosen, **on_device)
    assert demand == plan.ram_anon + loading + page_table_bytes(loading) + last
    cpu = predicted_peak_bytes(acc, roomy, ctx=64, prompt_tokens=8, experts=chosen)
    assert demand > cpu  # every tensor's pages while it loads, not only the chosen experts'
    baseline = predicted_peak_bytes(acc, roomy, ctx=64, prompt_tokens=8, **on_device)
    file_pages = resident_file_bytes(acc)
    largest = max(t.nbytes for t in acc.tensors if t.group != "embeddings")
    assert baseline == plan.ram_anon + file_pages + page_table_bytes(file_pages) + largest
    room = 4 << 30  # beside the CUDA runtime's host memory
    cuda = predicted_peak_bytes(acc, room, ctx=64, prompt_tokens=8, vram_bytes=roomy)
    cuda_plan = make_plan(acc, PlanLimits(ram_bytes=room, vram_bytes=roomy, ctx=64, n_ubatch=8, n_outputs=8))
    assert cuda == cuda_plan.ram_anon + file_pages + page_table_bytes(file_pages)  # no message: a copy
    assert predicted_peak_bytes(acc, 1 << 20, ctx=64, experts=chosen, **on_device) == 1 << 20
