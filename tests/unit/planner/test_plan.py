"""`appliance plan`: exact byte totals, verdicts and arguments, reference plans from evidence/."""

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader

from appliance.core.errors import ApplianceError
from appliance.core.units import PAGE_BYTES
from appliance.planner.accounting import account_file
from appliance.planner.offload import Offload
from appliance.planner.plan import (
    CUDA,
    CUDA_CONTEXT_BYTES,
    CUDA_HOST_BYTES,
    RPC,
    RPC_SERVER_BYTES,
    PlanLimits,
    kv_cells,
    make_plan,
    output_buffer_bytes,
    page_table_bytes,
    predicted_peak_bytes,
    process_bytes,
    upload_message_bytes,
)
from tests.conftest import run_cli
from tests.models import tiny_model

MiB = 1 << 20


def plan_json(model: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    result = run_cli("plan", str(model), "--json", *args)
    return result.returncode, json.loads(result.stdout), result.stderr


@pytest.mark.parametrize("arch", ["qwen3moe", "qwen35moe"])
def test_group_totals_add_up_to_the_tensor_data_in_the_file(arch: str) -> None:
    model = tiny_model(arch)
    code, doc, _ = plan_json(model, "--ram", "1GiB", "--vram", "0")
    assert code == 0
    groups = doc["plan"]["groups"]
    reader = GGUFReader(model)
    assert sum(groups.values()) == sum(int(t.n_bytes) for t in reader.tensors)
    data_start = min(t.data_offset for t in reader.tensors)
    padding = doc["accounting"]["padding_bytes"]
    assert sum(groups.values()) + padding == model.stat().st_size - data_start
    assert groups["routed_experts"] > 0.9 * sum(groups.values())


def test_cpu_only_verdicts_follow_the_ram_limit() -> None:
    model = tiny_model("qwen3moe")
    size = model.stat().st_size
    code, roomy, _ = plan_json(model, "--ram", "1GiB", "--vram", "0")
    assert code == 0 and roomy["plan"]["verdict"] == "fits_in_ram_plus_vram"
    assert roomy["plan"]["env"] == {} and "--no-repack" not in roomy["plan"]["args"]
    assert (
        roomy["plan"]["ram_file"]
        == size - roomy["accounting"]["header_bytes"] - roomy["accounting"]["padding_bytes"]
    )

    code, tight, _ = plan_json(model, "--ram", "96MiB", "--vram", "0")
    assert code == 0 and tight["plan"]["verdict"] == "oversubscribed"
    assert tight["plan"]["env"] == {"LLAMA_MMAP_DEMAND": "1"}
    assert "--no-repack" in tight["plan"]["args"]
    roof = tight["plan"]["roofline"]
    assert roof["routed_bytes_per_token"] == tight["accounting"]["routed_bytes_per_token"]
    assert roof["ssd_cold_tps"] == pytest.approx(7e9 / roof["routed_bytes_per_token"], rel=1e-6)
    assert 0 < roof["uniform_hit_rate"] < 1

    code, none, stderr = plan_json(model, "--ram", "40MiB", "--vram", "0")
    assert code == 1 and none["plan"]["verdict"] == "does_not_start"
    assert stderr.startswith("error: plan: does not start: the smallest working set")
    assert "exceeds the usable RAM (38.00 MiB) by" in stderr


def test_gpu_plans_place_top_layers_experts_first() -> None:
    acc = account_file(tiny_model("qwen3moe"))
    layer_experts = acc.routed_by_layer[3]
    whole = make_plan(acc, PlanLimits(ram_bytes=4 << 30, vram_bytes=4 << 30))
    assert whole.verdict == "fits_in_vram"
    assert "-ngl" in whole.args and whole.args[whole.args.index("-ngl") + 1] == "5"
    assert "--n-cpu-moe" not in whole.args and "--cpu-moe" not in whole.args
    # room for the fixed part and roughly two layers of experts
    fixed = whole.vram_total - acc.groups["routed_experts"]
    two_layers = int((fixed + 2.5 * layer_experts) / 0.95)
    part = make_plan(acc, PlanLimits(ram_bytes=4 << 30, vram_bytes=two_layers))
    assert part.verdict == "fits_in_ram_plus_vram"
    assert part.args[part.args.index("--n-cpu-moe") + 1] == "2"
    assert part.vram_total <= two_layers
    vram_experts = next(b.bytes for b in part.budget if b.item == "weights: routed experts")
    assert vram_experts == acc.routed_by_layer[2] + acc.routed_by_layer[3]


def test_ngl_counts_llama_cpp_s_output_slot_in_both_branches() -> None:
    """llama.cpp offloads the last -ngl of n_layer + 1 slots, the output head last: all 4 layers
    take -ngl 5, and a partial offload of N layers -ngl N + 1 with the output head on the GPU."""
    acc = account_file(tiny_model("qwen3moe"))
    output = acc.groups["output"] + acc.groups["other"]
    whole = make_plan(acc, PlanLimits(ram_bytes=4 << 30, vram_bytes=4 << 30))
    assert (whole.gpu_layers, whole.ngl, whole.output_on_gpu) == (4, 5, True)
    host_only = make_plan(acc, PlanLimits(ram_bytes=4 << 30, vram_bytes=0))
    assert (host_only.ngl, host_only.output_on_gpu) == (0, False)
    gpu_fixed = (
        whole.vram_total
        - sum(
            b.bytes
            for b in whole.budget
            if b.tier == "vram" and b.item.startswith("weights: ") and "output" not in b.item
        )
        - next(b.bytes for b in whole.budget if b.item == "KV cache + recurrent state" and b.tier == "vram")
    )
    one_layer = next(
        vram
        for vram in range(int(gpu_fixed / 0.95), 4 << 30, 1 << 16)
        if make_plan(acc, PlanLimits(ram_bytes=4 << 30, vram_bytes=vram)).gpu_layers == 1
    )
    part = make_plan(acc, PlanLimits(ram_bytes=4 << 30, vram_bytes=one_layer))
    assert (part.gpu_layers, part.ngl, part.output_on_gpu) == (1, 2, True)
    assert part.args[part.args.index("-ngl") + 1] == "2"
    assert next(b.bytes for b in part.budget if b.item == "weights: output head") == output
    # the output head's pages are the GPU's, not the host's
    assert part.ram_file == host_only.ram_file - output - sum(
        b.bytes for b in part.budget if b.item.startswith("weights: layers")
    )
    # not even the output head fits: nothing is offloaded
    tiny = make_plan(acc, PlanLimits(ram_bytes=4 << 30, vram_bytes=int(gpu_fixed / 0.95) - (1 << 20)))
    assert (tiny.gpu_layers, tiny.ngl, tiny.output_on_gpu) == (0, 0, False)


def test_predicted_peak_is_anonymous_plus_file_pages_capped_by_the_limit() -> None:
    acc = account_file(tiny_model("qwen35moe"))
    roomy = predicted_peak_bytes(acc, 1 << 30, ctx=4096)  # prompt unknown: one ubatch of outputs
    plan = make_plan(acc, PlanLimits(ram_bytes=1 << 30, vram_bytes=0, ctx=4096, n_outputs=512))
    # every tensor byte and the header, rounded out to whole pages, never past the file's end,
    # and the page tables that map them
    whole_file = -(-acc.file_size // PAGE_BYTES) * PAGE_BYTES
    assert plan.ram_anon + plan.ram_file + acc.header_bytes <= roomy
    assert roomy <= plan.ram_anon + whole_file + page_table_bytes(whole_file)
    assert roomy > acc.tensor_data_bytes + page_table_bytes(acc.tensor_data_bytes)
    assert predicted_peak_bytes(acc, 48 * MiB, ctx=4096) == 48 * MiB
    short = predicted_peak_bytes(acc, 1 << 30, ctx=4096, prompt_tokens=46)
    assert acc.tensor_data_bytes < short < roomy  # a short prompt touches less compute buffer
    assert predicted_peak_bytes(acc, 1 << 30, ctx=4096, prompt_tokens=512) == roomy
    # past a ubatch the compute buffer stays; the output buffer gains a logits row a token
    longer = predicted_peak_bytes(acc, 1 << 30, ctx=4096, prompt_tokens=600)
    assert longer - roomy == output_buffer_bytes(acc.facts, 88) == 88 * 4 * acc.facts.vocab


def test_the_kv_cache_counts_llama_cpp_s_cells_the_context_rounded_up_to_256() -> None:
    """The Qwen3-30B-shape slice's engine reported 1,048,576 B of KV cache at ctx 28: 256 cells
    of 2 attention layers x 4 KV heads x (128 + 128) x 2 B."""
    assert [kv_cells(n) for n in (1, 28, 256, 257, 4096)] == [256, 256, 256, 512, 4096]
    acc = account_file(tiny_model("qwen3moe"))
    per_cell = acc.facts.kv_bytes_per_token()

    def kv(ctx: int) -> int:
        plan = make_plan(acc, PlanLimits(ram_bytes=1 << 30, vram_bytes=0, ctx=ctx))
        return next(b.bytes for b in plan.budget if b.item.startswith("KV cache"))

    assert kv(28) == kv(256) == 256 * per_cell
    assert kv(257) == 512 * per_cell


def test_the_process_estimate_covers_the_anonymous_memory_measured_at_full_vocabularies() -> None:
    """The CI slices' engines ended with 90,845,184 B (248,320 tokens) and 54,161,408 B
    (151,936) of anonymous memory, of which their compute buffers and KV caches (as the engine
    reported them) and Qwen3.5's recurrent state (the planner's figure) were 19,503,514 +
    524,288 + 6,586,368 and 11,859,395 + 1,048,576 B: 191 B and 161 B a token above 16 MiB."""
    for vocab, anon, engine_buffers in (
        (248_320, 90_845_184, 19_503_514 + 524_288 + 6_586_368),
        (151_936, 54_161_408, 11_859_395 + 1_048_576),
    ):
        facts = dataclasses.replace(account_file(tiny_model("qwen3moe")).facts, vocab=vocab)
        assert process_bytes(facts) >= anon - engine_buffers
        assert process_bytes(facts) <= (anon - engine_buffers) * 1.4  # not absurdly over either


def test_the_stand_in_device_reserves_its_server_process_not_a_cuda_context() -> None:
    acc = account_file(tiny_model("qwen3moe"))
    limits = {"ram_bytes": 1 << 30, "vram_bytes": 1 << 30}
    cuda = make_plan(acc, PlanLimits(**limits))
    rpc = make_plan(acc, PlanLimits(**limits, device=RPC))
    fixed = {
        p.limits.device: next(
            b for b in p.budget if b.tier == "vram" and "estimate" in b.item and "compute" not in b.item
        )
        for p in (cuda, rpc)
    }
    assert (fixed[CUDA].item, fixed[CUDA].bytes) == (
        "CUDA context and workspace (estimate)",
        CUDA_CONTEXT_BYTES,
    )
    top = acc.facts.layers - 1  # its largest tensor's message, received after every other layer's
    largest = max(t.nbytes for t in acc.tensors if t.layer == top)
    assert fixed[RPC].item == "RPC server process and an upload's message (estimate)"
    assert fixed[RPC].bytes == RPC_SERVER_BYTES + largest
    assert cuda.vram_total - rpc.vram_total == CUDA_CONTEXT_BYTES - RPC_SERVER_BYTES - largest
    assert cuda.ram_anon - rpc.ram_anon == CUDA_HOST_BYTES  # no CUDA runtime in the engine's memory
    assert rpc.args == cuda.args  # the same placement: both hold the whole model
    with pytest.raises(ApplianceError, match="^unknown device kind 'vulkan' \\(one of cuda, rpc\\)$"):
        make_plan(acc, PlanLimits(**limits, device="vulkan"))


def test_an_upload_message_counts_by_what_it_exceeds_the_layers_loaded_after_it() -> None:
    """The RPC server holds a tensor's message beside the buffers of the tensors loaded before
    it: the output head first, then the layers in order. The last layer's largest tensor counts
    whole; an earlier tensor only by what it exceeds the device's bytes of the layers after it."""
    acc = account_file(tiny_model("qwen3moe"))
    layers = acc.facts.layers
    head = max(t.nbytes for t in acc.tensors if t.group in ("output", "other"))
    assert upload_message_bytes(acc, Offload.of_ngl(layers, 1, layers)) == head  # the head alone
    of_layer = {
        i: [t.nbytes for t in acc.tensors if t.layer == i and t.group != "routed_experts"]
        for i in range(layers)
    }
    dense_top = upload_message_bytes(acc, Offload.of_ngl(layers, 2, layers))  # the last layer's dense part
    assert dense_top == max(max(of_layer[layers - 1]), head - sum(of_layer[layers - 1]))
    everything = upload_message_bytes(acc, Offload.of_ngl(layers, layers + 1, 0))
    assert everything == max(t.nbytes for t in acc.tensors if t.layer == layers - 1)
