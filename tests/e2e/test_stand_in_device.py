"""The stand-in GPU at process level: llama.cpp's RPC server (ggml-rpc-server, from the patched
local build) on 127.0.0.1, and llama-moe-trace offloading to it with `--rpc` and the placement
the planner gives for a device budget.

The placement checks are the planner's output-slot defect: llama.cpp counts n_layer + 1 offload
slots, the output head last, so a plan for "every layer" that says `-ngl n_layer` leaves layer 0
on the host (the engine logs "offloaded 4/5 layers"); the plan must say `-ngl n_layer + 1`.
"""

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.core.units import PAGE_BYTES
from appliance.host.pagecache import evict
from appliance.planner.accounting import account_file
from appliance.planner.pages import DEMAND_ENV
from appliance.planner.plan import Plan, PlanLimits, make_plan
from appliance.runs.device_server import LOOPBACK, listening
from appliance.runs.placement import placement_options
from appliance.trace.format import KIND_PROMPT, read_trace
from tests.e2e.conftest import TracerRun, run_tracer
from tests.models import tiny_model

PROMPT = "The cat sat on the mat. The dog sat on the log."
ARGS = ("-n", "8", "--ignore-eos", "--no-repack")
READY_S = 30.0

pytestmark = pytest.mark.engine


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def device(engine_bin: Path) -> Iterator[str]:
    """A ggml-rpc-server on a free loopback port, ended by its pid after the test."""
    port = free_port()
    server = subprocess.Popen(
        [str(engine_bin / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port), "-t", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + READY_S
        while not listening(Path(f"/proc/{server.pid}/net/tcp").read_text(), port):
            assert server.poll() is None, f"ggml-rpc-server exited: {server.stderr.read()!r}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "ggml-rpc-server did not listen in time"
            time.sleep(0.05)
        assert listening(Path(f"/proc/{server.pid}/net/tcp").read_text(), port) == [LOOPBACK[0]]
        yield f"127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait(timeout=10)


def on_device(
    engine_bin: Path, model: Path, out: Path, device: str, plan: Plan, env: dict[str, str] | None = None
) -> TracerRun:
    """The tracer on the stand-in device with the plan's placement."""
    args = (*ARGS, "--rpc", device, *placement_options(tuple(plan.args)))
    return run_tracer(engine_bin, model, out, *args, prompt=PROMPT, env=env)


def device_bytes(placement: dict[str, Any]) -> int:
    """The model bytes the engine placed on the stand-in device."""
    return sum(int(p["bytes"]) for p in placement["model"].values() if p["device"] == "RPC0")


def device_tensors(placement: dict[str, Any]) -> int:
    """The model tensors the engine placed on the stand-in device."""
    return sum(int(p["tensors"]) for p in placement["model"].values() if p["device"] == "RPC0")


def test_the_plan_for_every_layer_offloads_every_slot_to_the_stand_in(
    engine_bin: Path, device: str, tmp_path: Path
) -> None:
    model = tiny_model("qwen3moe")
    acc = account_file(model)
    plan = make_plan(acc, PlanLimits(ram_bytes=1 << 30, vram_bytes=1 << 30))
    assert plan.gpu_layers == acc.facts.layers
    run = on_device(engine_bin, model, tmp_path / "rpc", device, plan)
    timings = run.timings
    assert timings["backend"] == "RPC" and "RPC0" in timings["devices"].split(",")
    placement = timings["placement"]
    assert placement["layers_offloadable"] == acc.facts.layers + 1
    assert placement["layers_offloaded"] == placement["layers_offloadable"]
    # everything but the token embeddings (which llama.cpp keeps on the host) is on the device
    assert device_bytes(placement) == acc.tensor_data_bytes - acc.groups["embeddings"]
    host = run_tracer(engine_bin, model, tmp_path / "cpu", *ARGS, prompt=PROMPT)
    assert run.text == host.text and run.text
    on_rpc, on_host = read_trace(run.trace), read_trace(host.trace)
    for field in ("step", "layer", "pos", "ids"):
        assert np.array_equal(on_rpc.rows[field], on_host.rows[field]), field


def test_a_partial_plan_puts_the_output_head_on_the_device_too(
    engine_bin: Path, device: str, tmp_path: Path
) -> None:
    model = tiny_model("qwen3moe")
    acc = account_file(model)
    whole = make_plan(acc, PlanLimits(ram_bytes=1 << 30, vram_bytes=1 << 30))
    fixed = whole.vram_total - sum(
        b.bytes for b in whole.budget if b.tier == "vram" and b.item.startswith("weights")
    )
    budget = next(
        v
        for v in range(fixed, 1 << 30, 1 << 16)
        if make_plan(acc, PlanLimits(ram_bytes=1 << 30, vram_bytes=v)).gpu_layers == 1
    )
    plan = make_plan(acc, PlanLimits(ram_bytes=1 << 30, vram_bytes=budget))
    assert (plan.gpu_layers, plan.ngl, plan.output_on_gpu) == (1, 2, True)
    run = on_device(engine_bin, model, tmp_path, device, plan)
    placement = run.timings["placement"]
    assert placement["layers_offloaded"] == plan.ngl
    planned = sum(b.bytes for b in plan.budget if b.tier == "vram" and b.item.startswith("weights"))
    assert device_bytes(placement) == planned  # the last layer's dense part and experts, and the output head


def test_tracing_cuts_the_device_graph_at_each_router_and_changes_no_text(
    engine_bin: Path, device: str, tmp_path: Path
) -> None:
    """Issue 51's second defect: observing the router ends the device's graph at each top-k view,
    so a backend's fused router kernel (CUDA's) cannot run in a traced trial. The record says so
    (kernel_path): traced on the stand-in, one cut per MoE layer and step on the RPC device's
    buffer; with --no-trace no callback and no cut; the texts are the same."""
    model = tiny_model("qwen3moe")
    acc = account_file(model)
    plan = make_plan(acc, PlanLimits(ram_bytes=1 << 30, vram_bytes=1 << 30))
    traced = on_device(engine_bin, model, tmp_path / "traced", device, plan)
    placed = ("--rpc", device, *placement_options(tuple(plan.args)))
    untraced = run_tracer(
        engine_bin, model, tmp_path / "untraced", *ARGS, *placed, "--no-trace", prompt=PROMPT
    )
    host = run_tracer(engine_bin, model, tmp_path / "host", *ARGS, prompt=PROMPT)
    assert traced.text == untraced.text == host.text and traced.text
    steps = 1 + int(ARGS[ARGS.index("-n") + 1])  # the prompt's one ubatch, then each decode step
    cut = traced.timings["kernel_path"]
    assert cut.pop("cut_buffer") == f"RPC0[{device}]"
    assert cut == {
        "eval_callback": True,
        "graph_cuts": steps * acc.facts.layers,
        "graph_cuts_per_decode_token": acc.facts.layers,
        "router_fusion": "server-backend",
    }
    assert untraced.timings["kernel_path"] == {
        "eval_callback": False,
        "graph_cuts": 0,
        "graph_cuts_per_decode_token": 0,
        "cut_buffer": None,
        "router_fusion": "not-cut",
    }
    on_host = host.timings["kernel_path"]
    assert (on_host["cut_buffer"], on_host["router_fusion"]) == ("CPU", "no-fused-kernel")


def test_a_demand_mapped_load_reads_the_device_tensors_once_and_keeps_none_of_their_pages(
    engine_bin: Path, device: str, tmp_path: Path
) -> None:
    """Issue 51's third defect: with demand mmap llama.cpp copies each tensor placed on a device
    out of the mapping and leaves its pages mapped and cached (it unmaps only the file's prefix
    and suffix that no host tensor uses). With the last layer's experts kept on the host, so
    that the host's mapped range spans every device tensor, from a cold page cache: the load
    reads the device's bytes once (the goal: at most 1.1x what the device and the host's mapped
    tensors need), the tracer drops every device tensor's whole pages after the load, and the
    mapping then holds none of them (it held 49 MB before)."""
    model = tiny_model("qwen3moe")
    acc = account_file(model)
    last = acc.facts.layers - 1
    placed = ("--rpc", device, "-ngl", "99", "-ot", f"blk\\.{last}\\.ffn_.*_exps=CPU")
    evict(model)
    run = run_tracer(
        engine_bin, model, tmp_path / "demand", *ARGS, *placed, prompt=PROMPT, env={DEMAND_ENV: "1"}
    )
    timings = run.timings
    placement = timings["placement"]
    on_device_bytes = device_bytes(placement)
    host = [p for p in placement["model"].values() if p["device"] == "CPU"]
    on_host_bytes = sum(int(p["bytes"]) for p in host)
    assert sum(int(p["expert_bytes"]) for p in host) > 0 and on_device_bytes > 30 << 20
    load_reads = timings["io"]["load_end"]["read_bytes"]
    assert on_device_bytes <= load_reads <= 1.1 * (on_device_bytes + on_host_bytes)
    # what stays of a device tensor is at most the page at each end, shared with a neighbour
    edges = 2 * PAGE_BYTES * device_tensors(placement)
    assert on_device_bytes - edges <= timings["uploaded_pages_dropped_bytes"] <= on_device_bytes
    assert timings["residency_after_load"]["model_mapped_rss_bytes"] <= edges
    cpu = run_tracer(engine_bin, model, tmp_path / "host", *ARGS, prompt=PROMPT, env={DEMAND_ENV: "1"})
    assert run.text == cpu.text and run.text
    assert cpu.timings["uploaded_pages_dropped_bytes"] == 0  # nothing on a device


def test_the_expert_cache_holds_only_the_experts_left_on_the_host(
    cache_bin: Path, device: str, tmp_path: Path
) -> None:
    """Issue 51's sixth defect: patch 0004 took its layout from the GGUF header, every layer's
    experts, and refused a run whose device layers' experts are not in the mapping. Now it
    caches the layers whose experts the engine left on the host (--n-cpu-moe 2: the first two),
    lets the device compute the others, counts only host bytes beside the cached experts (the
    auto capacity's budget), refuses a placement with no host experts in one line, and changes
    no text."""
    model = tiny_model("qwen3moe")
    acc = account_file(model)
    cache = ("--expert-cache", "lru", "--expert-cache-capacity", "8")
    placed = ("--rpc", device, "-ngl", "99")
    env = {DEMAND_ENV: "1"}
    run = run_tracer(
        cache_bin,
        model,
        tmp_path / "partial",
        *ARGS,
        *placed,
        "--n-cpu-moe",
        "2",
        *cache,
        prompt=PROMPT,
        env=env,
    )
    record = run.timings["expert_cache"]
    assert (record["host_layers"], record["device_layers"]) == (2, acc.facts.layers - 2)
    k = acc.facts.experts_used
    assert record["decode"]["hits"] + record["decode"]["misses"] == 8 * 2 * k  # -n 8, two host layers
    on_rpc = [p for p in run.timings["placement"]["model"].values() if p["device"] == "RPC0"]
    device_non_expert = sum(int(p["bytes"]) - int(p["expert_bytes"]) for p in on_rpc)
    expert_total = sum(t.nbytes for t in acc.tensors if t.group == "routed_experts")
    assert record["non_expert_bytes"] == model.stat().st_size - expert_total - device_non_expert
    host = run_tracer(cache_bin, model, tmp_path / "host", *ARGS, *cache, prompt=PROMPT, env=env)
    assert host.timings["expert_cache"]["device_layers"] == 0 and run.text == host.text and run.text
    whole = run_tracer(
        cache_bin, model, tmp_path / "whole", *ARGS, *placed, *cache, prompt=PROMPT, env=env, check=False
    )
    assert whole.result.returncode != 0
    assert whole.result.stderr.decode().strip().splitlines()[-1] == (
        "llama-moe-trace: error: --expert-cache: every MoE layer's experts are on a device, none in host "
        "memory to cache (keep some on the host: --n-cpu-moe N or -ot)"
    )


def test_an_unreachable_device_server_is_one_line(engine_bin: Path, tmp_path: Path) -> None:
    closed = free_port()
    run = run_tracer(
        engine_bin,
        tiny_model("qwen3moe"),
        tmp_path,
        *ARGS,
        "--rpc",
        f"127.0.0.1:{closed}",
        prompt=PROMPT,
        check=False,
    )
    assert run.result.returncode == 1
    last = run.result.stderr.decode().strip().splitlines()[-1]
    assert last == (
        f"llama-moe-trace: error: --rpc: no device server answers at 127.0.0.1:{closed} "
        "(start ggml-rpc-server -H HOST -p PORT there first)"
    )


def test_prefetch_advises_only_the_host_experts_the_router_chose(
    engine_bin: Path, device: str, tmp_path: Path
) -> None:
    """Route-aware prefetch (0003) beside a device: layers 0-2's experts in the host mapping, layer
    3's and the output head on RPC0, a 107-token prompt in ubatches of 64: only the model's own
    host weights are advised, one call per (host layer, chosen expert, expert tensor) of each
    decode step, each covering one expert's slice of one tensor. (The RPC backend has no
    offload_op, so the scheduler never hands MUL_MAT_ID a device copy of host experts here, as
    CUDA does for 32+ token batches: this passes with and without 0003's host-weights check;
    scripts/gpu-check.sh measures it on CUDA.)"""
    model = tiny_model("qwen3moe")
    acc = account_file(model)
    prompt = PROMPT + " Then it ran far away into the woods, over the hill and far."
    args = (
        "-n",
        "4",
        "-ub",
        "64",
        "--ignore-eos",
        "--no-repack",
        "--prefetch-experts",
        "--rpc",
        device,
        "-ngl",
        "2",
    )
    run = run_tracer(engine_bin, model, tmp_path, *args, prompt=prompt, env={"LLAMA_MMAP_DEMAND": "1"})
    timings = run.timings
    assert timings["n_prompt_tokens"] > 64 and timings["placement"]["layers_offloaded"] == 2
    rows = read_trace(run.trace).rows
    host_layers = range(acc.facts.layers - 1)
    decode = rows[rows["step"] > 0]
    chosen = sum(
        len(np.unique(decode[(decode["step"] == step) & (decode["layer"] == layer)]["ids"]))
        for step in np.unique(decode["step"])
        for layer in host_layers
    )
    tensors = 3  # gate, up and down
    assert timings["prefetch_calls"] == tensors * chosen > 0
    slices = [b // acc.facts.experts for layer, b in acc.routed_by_layer.items() if layer in host_layers]
    per_tensor = min(slices) // tensors
    assert per_tensor * timings["prefetch_calls"] <= timings["prefetch_bytes"]
    assert timings["prefetch_bytes"] <= (max(slices) // tensors + 4096) * timings["prefetch_calls"]


def test_prefill_readers_read_only_the_experts_of_host_layers(
    engine_bin: Path, device: str, tmp_path: Path
) -> None:
    """Prefill readers (0006) beside a device: with layer 3 and the output head on RPC0 the
    readers map layers 0-2 only, read in each prompt step exactly what those layers' tokens chose
    (no limit here, so nothing is dropped before the prompt ends and nothing is read twice),
    and the text is the one the same placement gives without them."""
    model = tiny_model("qwen3moe")
    acc = account_file(model)
    prompt = PROMPT + " Then it ran far away into the woods, over the hill and far."
    args = ("-n", "4", "-ub", "64", "--ignore-eos", "--no-repack", "--rpc", device, "-ngl", "2")
    demand = {"LLAMA_MMAP_DEMAND": "1"}
    plain = run_tracer(engine_bin, model, tmp_path / "plain", *args, prompt=prompt, env=demand)
    readers = run_tracer(
        engine_bin, model, tmp_path / "readers", *args, "--prefill-readers", "2", prompt=prompt, env=demand
    )
    assert readers.text == plain.text and readers.text
    assert readers.trace.read_bytes() == plain.trace.read_bytes()
    record = readers.timings["prefill_readers"]
    host_layers = range(acc.facts.layers - 1)
    assert readers.timings["placement"]["layers_offloaded"] == 2
    assert record["layers_mapped"] == len(host_layers)
    n_steps = -(-readers.timings["n_prompt_tokens"] // 64)
    assert n_steps == 2 and record["layers_read"] == len(host_layers) * n_steps
    rows = read_trace(readers.trace).rows
    prompt_rows = rows[rows["kind"] == KIND_PROMPT]
    per_expert = {layer: b // acc.facts.experts for layer, b in acc.routed_by_layer.items()}
    union = sum(
        len(np.unique(prompt_rows[prompt_rows["layer"] == layer]["ids"])) * per_expert[layer]
        for layer in host_layers
    )
    assert record["budget_source"] == "none" and record["queued_bytes"] == union > 0
