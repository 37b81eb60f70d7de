"""A conservative startup plan for llama.cpp: which bytes go to the GPU, which stay in RAM,
which must be demand-mapped from storage, the arguments that realize it, and the decode
ceiling the storage tier imposes.

The model side is exact (GGUF accounting); the engine side (compute buffers, runtime overhead)
is estimated with the constants below, each stated in the plan. llama.cpp placement facts this
relies on: the token embedding table always stays on the CPU; `--n-cpu-moe N` keeps the routed
experts of layers 0..N-1 in host memory; llama.cpp counts n_layer + 1 offload slots, the output
head being the last (src/llama-model.cpp: `i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)`), so
`-ngl K` offloads the output head and the last K - 1 layers, and every layer takes n_layer + 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from appliance.core.errors import ApplianceError
from appliance.core.units import PAGE_BYTES, format_size
from appliance.planner.accounting import Accounting, ArchFacts
from appliance.planner.offload import Offload
from appliance.planner.pages import DEMAND_ENV, device_file_bytes, resident_file_bytes

if TYPE_CHECKING:
    from appliance.planner.cache_pages import CachePeak

GiB = 1 << 30
MiB = 1 << 20
CUDA_CONTEXT_BYTES = 768 * MiB  # CUDA context, cuBLAS workspace, allocator slack on the GPU
CUDA_HOST_BYTES = 1 * GiB  # CUDA runtime, driver and pinned staging buffers in host memory
# the stand-in GPU (llama.cpp's RPC server, appliance.runs.device_server): beside its buffers,
# the server's cgroup holds its process and a tensor's upload message while it copies it in
# (upload_message_bytes). Measured: 0.8 MB and 1.1 MB beyond buffers and largest tensor (a
# 64 MiB qwen3moe wholly offloaded, 71.7 MB peak; the tiny-stand-in sweep, 239.2 MB peak beside
# a 33.6 MB expert tensor). The engine's RPC client builds the same message in host memory
# (loading_bytes).
RPC_SERVER_BYTES = 2 * MiB
CUDA, RPC = "cuda", "rpc"
# per device kind: (its fixed part in device memory, its runtime's part in host memory, label)
DEVICE_OVERHEAD = {
    CUDA: (CUDA_CONTEXT_BYTES, CUDA_HOST_BYTES, "CUDA context and workspace"),
    RPC: (RPC_SERVER_BYTES, 0, "RPC server process and an upload's message"),
}
# llama.cpp binary and libraries, thread stacks, allocator arenas (CPU build): make demo measured
# at most 10.3 MiB of anonymous memory and charged library pages beside a 260-token model
PROCESS_BYTES = 16 * MiB
# Per vocabulary token: the GGUF's copy of its text, the vocabulary's entry (text, score,
# attributes), its token-to-id map node, its cached piece, the sampler's candidate and a logits
# row. The CI slices measured 90.8 MB (248,320 tokens) and 54.2 MB (151,936) of anonymous memory
# at the end; less the engine's own compute and KV buffers and the recurrent state, 191 B and
# 161 B a token above PROCESS_BYTES (docs/limitations.md). 256 keeps the estimate over both.
VOCAB_BYTES_PER_TOKEN = 256
# Those slices' prompts had 19 and 28 tokens, and llama-moe-trace keeps a logits row (4 B a
# vocabulary token) for every prompt token: the figure above includes that many rows; the output
# buffer's rows past this many are counted on their own (output_buffer_bytes).
PROCESS_OUTPUT_ROWS = 32
KV_CELL_PAD = 256  # llama.cpp pads the KV cache's cells to a multiple of this (ctx 28: 256 cells)
VRAM_MARGIN = 0.05  # of the VRAM limit kept free
RAM_MARGIN = 0.05  # of the RAM limit kept free (page tables, kernel, other processes)


class PlanVerdict(StrEnum):
    """Where a model lands under the limits; the value is what plan JSON carries."""

    FITS_IN_VRAM = "fits_in_vram"
    FITS_IN_RAM_PLUS_VRAM = "fits_in_ram_plus_vram"
    OVERSUBSCRIBED = "oversubscribed"
    DOES_NOT_START = "does_not_start"

    @property
    def text(self) -> str:
        return VERDICT_TEXT[self]


VERDICT_TEXT = {
    PlanVerdict.FITS_IN_VRAM: "fits in VRAM",
    PlanVerdict.FITS_IN_RAM_PLUS_VRAM: "fits in RAM plus VRAM",
    PlanVerdict.OVERSUBSCRIBED: "oversubscribed (demand mmap required)",
    PlanVerdict.DOES_NOT_START: "does not start",
}


@dataclass(frozen=True)
class PlanLimits:
    ram_bytes: int
    vram_bytes: int = 0
    ctx: int = 4096
    n_batch: int = 2048
    n_ubatch: int = 512
    ssd_gbps: float = 7.0  # GB/s sequential-ish read of the model's storage
    pcie_gbps: float = 25.0  # GB/s host to GPU (PCIe 4.0 x16 effective)
    ram_gbps: float = 60.0  # GB/s host memory read bandwidth (dual-channel DDR5)
    hit_rate: float | None = None  # measured expert-cache hit rate from a trace replay
    device: str = CUDA  # the GPU's kind: CUDA, or RPC for the stand-in (DEVICE_OVERHEAD)
    n_outputs: int = 1  # logits rows a batch keeps: llama-moe-trace asks one for every prompt token


@dataclass
class BudgetLine:
    tier: str  # "vram" or "ram"
    item: str
    bytes: int
    note: str = ""


@dataclass
class Roofline:
    routed_bytes_per_token: int  # routed expert bytes per token in host memory tiers
    dense_host_bytes_per_token: int
    page_cache_bytes: int  # host memory left for model file pages
    expert_bytes_on_host: int
    uniform_hit_rate: float  # page-cache hit rate if experts were used uniformly
    # decode ceilings in tokens/s; None where that tier moves no bytes per token
    ssd_cold_tps: float | None  # every routed byte from storage
    ssd_uniform_tps: float | None
    ssd_measured_tps: float | None
    pcie_tps: float | None  # if host experts were streamed to the GPU instead
    ram_tps: float | None  # host-resident experts read from RAM


@dataclass
class Plan:
    model: str
    arch: str
    limits: PlanLimits
    verdict: PlanVerdict
    verdict_text: str
    reason: str
    gpu_layers: int  # repeating layers on the GPU (the last ones)
    output_on_gpu: bool
    ngl: int  # the -ngl that realizes both: gpu_layers, plus one slot for the output head
    cpu_moe_layers: int  # routed experts of layers 0..N-1 kept in host memory
    demand_mmap: bool
    args: list[str]
    env: dict[str, str]
    budget: list[BudgetLine]
    vram_total: int
    ram_anon: int
    ram_file: int  # model file pages that must or may stay resident
    ram_min_file: int  # smallest resident set of file pages that still runs
    groups: dict[str, int]
    tensor_data_bytes: int
    roofline: Roofline | None
    assumptions: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compute_buffer_bytes(acc: Accounting, n_ubatch: int) -> int:
    """Estimate of one backend's compute buffer: a ubatch of f32 activations through the widest
    parts of the graph (logits, residual stream temporaries, MoE intermediates)."""
    f = acc.facts
    return n_ubatch * 4 * (f.vocab + 16 * f.embedding + 3 * f.experts_used * f.expert_ff)


def _layer_sets(acc: Accounting) -> tuple[dict[int, int], dict[int, int]]:
    """Per-layer non-routed bytes that follow -ngl, and routed bytes."""
    dense: dict[int, int] = {}
    for t in acc.tensors:
        if t.layer >= 0 and t.group != "routed_experts":
            dense[t.layer] = dense.get(t.layer, 0) + t.nbytes
    return dense, dict(acc.routed_by_layer)


def kv_cells(ctx: int) -> int:
    """KV cache cells llama.cpp allocates for a context: ctx rounded up to KV_CELL_PAD."""
    return -(-ctx // KV_CELL_PAD) * KV_CELL_PAD


def _cache_bytes(acc: Accounting, ctx: int, layers: set[int]) -> int:
    f = acc.facts
    kv = sum(
        f.head_count_kv[i] * (f.key_length + f.value_length) * 2 for i in f.attention_layers if i in layers
    ) * kv_cells(ctx)
    n_rec = len(f.recurrent_layers) or 1
    rec = f.recurrent_state_bytes * sum(1 for i in f.recurrent_layers if i in layers) // n_rec
    return kv + rec


def check_limits(limits: PlanLimits) -> None:
    """Refuse limits no plan can be made for (the CLI's option types refuse them first)."""
    if limits.ram_bytes <= 0:
        raise ApplianceError("--ram must be more than 0")
    if limits.vram_bytes < 0:
        raise ApplianceError("--vram must be 0 (CPU only) or more")
    for name, count in (
        ("--ctx", limits.ctx),
        ("--ubatch", limits.n_ubatch),
        ("batch", limits.n_batch),
        ("outputs", limits.n_outputs),
    ):
        if count < 1:
            raise ApplianceError(f"{name} must be at least 1, got {count}")
    for name, rate in (
        ("--ssd-gbps", limits.ssd_gbps),
        ("--pcie-gbps", limits.pcie_gbps),
        ("--ram-gbps", limits.ram_gbps),
    ):
        if not math.isfinite(rate) or rate <= 0:
            raise ApplianceError(f"{name} must be a finite number above 0, got {rate}")
    if limits.device not in DEVICE_OVERHEAD:
        raise ApplianceError(f"unknown device kind {limits.device!r} (one of {', '.join(DEVICE_OVERHEAD)})")
    if limits.hit_rate is not None and not 0 <= limits.hit_rate <= 1:
        raise ApplianceError(f"--hit-rate must be from 0 to 1, got {limits.hit_rate}")


def output_buffer_bytes(facts: ArchFacts, n_outputs: int) -> int:
    """`n_outputs` rows of llama.cpp's host output buffer, one f32 logits row per output the
    largest batch asked for (llama-moe-trace asks for every prompt token's, so that the last
    layer routes them all: 534 tokens of a 248,320-token vocabulary are 530 MB)."""
    return n_outputs * 4 * facts.vocab


def page_table_bytes(mapped_bytes: int) -> int:
    """The page-table entries (8 B a 4 KiB page) that map `mapped_bytes` of the model file,
    charged to the memory cgroup: 36 MB for a 18.5 GB file mapped whole."""
    return -(-mapped_bytes // PAGE_BYTES) * 8


def process_bytes(facts: ArchFacts) -> int:
    """The engine process's own memory before any model buffer: runtime plus tokenizer."""
    return PROCESS_BYTES + VOCAB_BYTES_PER_TOKEN * facts.vocab


def upload_message_bytes(acc: Accounting, offload: Offload) -> int:
    """What the RPC server holds beyond its buffers while the model loads: it receives each
    tensor's upload whole before copying it in, when the tensors loaded before it are in its
    buffers already. llama.cpp creates (and loads) the output head first, then the layers in
    order, so a tensor's message counts beyond the device's final weights by what it exceeds the
    device's bytes of the layers after its own (within a layer the order is the architecture's,
    not modelled)."""
    by_layer: dict[int, int] = {}
    largest: dict[int, int] = {}
    for t in offload.tensors(acc):
        by_layer[t.layer] = by_layer.get(t.layer, 0) + t.nbytes
        largest[t.layer] = max(largest.get(t.layer, 0), t.nbytes)
    extra, after = 0, 0
    for layer in sorted(by_layer, reverse=True):  # the output head's -1 last: every layer after it
        extra = max(extra, largest[layer] - after)
        after += by_layer[layer]
    return extra


def make_plan(acc: Accounting, limits: PlanLimits) -> Plan:
    check_limits(limits)
    f = acc.facts
    layers = f.layers + f.nextn_layers
    all_layers = set(range(layers))
    dense, routed = _layer_sets(acc)
    embd = acc.groups["embeddings"]
    output = acc.groups["output"] + acc.groups["other"]
    compute = compute_buffer_bytes(acc, min(limits.n_ubatch, limits.ctx))
    vram_budget = int(limits.vram_bytes * (1 - VRAM_MARGIN))
    use_gpu = limits.vram_bytes > 0
    device_fixed, device_host, device_label = DEVICE_OVERHEAD[limits.device]

    def vram_need(on_gpu: int, moe_host: int) -> int:
        """Device bytes with the last `on_gpu` layers and the output head on the device and
        the experts of layers below `moe_host` on the host."""
        gpu = range(layers - on_gpu, layers)
        weights = sum(dense.get(i, 0) for i in gpu) + sum(routed.get(i, 0) for i in gpu if i >= moe_host)
        need = device_fixed + compute + output + weights + _cache_bytes(acc, limits.ctx, set(gpu))
        if limits.device == RPC:
            need += upload_message_bytes(acc, Offload.of_ngl(layers, on_gpu + 1, moe_host))
        return need

    gpu_layers, cpu_moe = 0, layers
    vram_lines: list[BudgetLine] = []
    if use_gpu:
        if vram_need(layers, layers) <= vram_budget:
            gpu_layers = layers
            cpu_moe = 0
            for layer in range(layers - 1, -1, -1):  # experts of the top layers go first
                if vram_need(layers, layer) > vram_budget:
                    cpu_moe = layer + 1
                    break
        else:
            while gpu_layers < layers and vram_need(gpu_layers + 1, layers) <= vram_budget:
                gpu_layers += 1
            cpu_moe = layers
    gpu_fixed = vram_need(0, layers)  # the output head's slot alone
    if limits.device == RPC:
        device_fixed += upload_message_bytes(acc, Offload.of_ngl(layers, gpu_layers + 1, cpu_moe))
    gpu_set = set(range(layers - gpu_layers, layers))
    host_set = all_layers - gpu_set
    experts_gpu = sum(routed.get(i, 0) for i in gpu_set if i >= cpu_moe)
    experts_host = acc.groups["routed_experts"] - experts_gpu
    dense_gpu = sum(dense.get(i, 0) for i in gpu_set)
    dense_host = sum(dense.get(i, 0) for i in host_set)
    # the output head takes the last offload slot, so any -ngl >= 1 puts it on the GPU; gpu_fixed
    # budgets it, and it stays on the host only when not even that fits
    output_on_gpu = use_gpu and gpu_fixed <= vram_budget
    ngl = gpu_layers + 1 if output_on_gpu else 0
    if use_gpu:
        vram_lines = [
            BudgetLine(
                "vram",
                "weights: layers (attention, SSM, shared experts, routers)",
                dense_gpu,
                f"{gpu_layers} of {layers} layers (-ngl {ngl} of {layers + 1} slots, output head last)",
            ),
            BudgetLine(
                "vram",
                "weights: routed experts",
                experts_gpu,
                f"layers {cpu_moe}..{layers - 1}" if experts_gpu else "none",
            ),
            BudgetLine("vram", "weights: output head", output if output_on_gpu else 0),
            BudgetLine(
                "vram",
                "KV cache + recurrent state",
                _cache_bytes(acc, limits.ctx, gpu_set),
                f"ctx {limits.ctx}, f16 K/V",
            ),
            BudgetLine(
                "vram", "compute buffer (estimate)", compute, f"ubatch {min(limits.n_ubatch, limits.ctx)}"
            ),
            BudgetLine("vram", f"{device_label} (estimate)", device_fixed),
        ]
    vram_total = sum(line.bytes for line in vram_lines)

    host_compute = compute if not use_gpu or gpu_layers < layers else compute // 8
    anon_lines = [
        BudgetLine(
            "ram",
            "process and runtime (estimate)",
            process_bytes(f) + (device_host if use_gpu else 0),
            "anonymous",
        ),
        BudgetLine("ram", "host compute buffer (estimate)", host_compute, "anonymous"),
        BudgetLine(
            "ram",
            "KV cache + recurrent state (host layers)",
            _cache_bytes(acc, limits.ctx, host_set),
            "anonymous",
        ),
    ]
    if limits.n_outputs > PROCESS_OUTPUT_ROWS:  # the process estimate holds the first rows
        extra = limits.n_outputs - PROCESS_OUTPUT_ROWS
        rows = f"{extra} f32 logits rows past the process estimate's {PROCESS_OUTPUT_ROWS}"
        anon_lines.append(BudgetLine("ram", "output buffer", output_buffer_bytes(f, extra), rows))
    ram_anon = sum(line.bytes for line in anon_lines)
    file_dense = embd + dense_host + (0 if output_on_gpu else output)
    file_lines = [
        BudgetLine("ram", "file pages: embeddings, host layers, output", file_dense, "mmap"),
        BudgetLine("ram", "file pages: routed experts in host memory", experts_host, "mmap"),
    ]
    ram_file = file_dense + experts_host
    max_expert = max(acc.expert_bytes_by_layer.values(), default=0)
    ram_min_file = file_dense + (f.experts_used * max_expert if experts_host else 0)
    ram_budget = int(limits.ram_bytes * (1 - RAM_MARGIN))

    if use_gpu and vram_total > limits.vram_bytes:
        verdict = PlanVerdict.DOES_NOT_START
        reason = (
            f"even with every routed expert in host memory the GPU needs "
            f"{format_size(vram_total)}, over the {format_size(limits.vram_bytes)} limit by "
            f"{format_size(vram_total - limits.vram_bytes)}"
        )
    elif ram_anon + ram_file <= ram_budget:
        verdict = (
            PlanVerdict.FITS_IN_VRAM
            if use_gpu and experts_host == 0 and gpu_layers == layers
            else PlanVerdict.FITS_IN_RAM_PLUS_VRAM
        )
        reason = f"host needs {format_size(ram_anon + ram_file)} of {format_size(ram_budget)} usable"
    elif ram_anon + ram_min_file <= ram_budget:
        verdict = PlanVerdict.OVERSUBSCRIBED
        reason = (
            f"host-side model bytes ({format_size(ram_file)}) exceed the "
            f"{format_size(ram_budget - ram_anon)} left after anonymous memory: "
            "experts are paged in from storage on demand"
        )
    else:
        verdict = PlanVerdict.DOES_NOT_START
        short = ram_anon + ram_min_file - ram_budget
        reason = (
            f"the smallest working set ({format_size(ram_anon + ram_min_file)}: anonymous "
            f"memory, non-expert weights and one token's experts of one layer) exceeds the "
            f"usable RAM ({format_size(ram_budget)}) by {format_size(short)}"
        )

    demand = verdict is PlanVerdict.OVERSUBSCRIBED
    args = [
        "-m",
        acc.source,
        "-c",
        str(limits.ctx),
        "-b",
        str(limits.n_batch),
        "-ub",
        str(min(limits.n_ubatch, limits.ctx)),
        "-ngl",
        str(ngl),
    ]
    if use_gpu and gpu_layers == layers and 0 < cpu_moe < layers:
        args += ["--n-cpu-moe", str(cpu_moe)]
    elif use_gpu and experts_host == acc.groups["routed_experts"] and gpu_layers:
        args += ["--cpu-moe"]
    if use_gpu:
        args += ["-fa", "on"]
    if demand:
        args += ["--no-repack"]
    env = {DEMAND_ENV: "1"} if demand else {}

    page_cache = max(ram_budget - ram_anon - file_dense, 0)
    routed_host_per_token = sum(
        b * f.experts_used
        for layer, b in acc.expert_bytes_by_layer.items()
        if layer in host_set or layer < cpu_moe
    )
    roofline = None
    if routed_host_per_token:
        hit = min(1.0, page_cache / experts_host) if experts_host else 1.0
        dense_per_token = file_dense - embd

        def tps(gbps: float, per_token: float) -> float | None:
            return round(gbps * 1e9 / per_token, 4) if per_token > 0 else None

        roofline = Roofline(
            routed_bytes_per_token=routed_host_per_token,
            dense_host_bytes_per_token=dense_per_token,
            page_cache_bytes=page_cache,
            expert_bytes_on_host=experts_host,
            uniform_hit_rate=hit,
            ssd_cold_tps=tps(limits.ssd_gbps, routed_host_per_token),
            ssd_uniform_tps=tps(limits.ssd_gbps, routed_host_per_token * (1 - hit)),
            ssd_measured_tps=(
                tps(limits.ssd_gbps, routed_host_per_token * (1 - limits.hit_rate))
                if limits.hit_rate is not None
                else None
            ),
            pcie_tps=tps(limits.pcie_gbps, routed_host_per_token),
            ram_tps=tps(limits.ram_gbps, routed_host_per_token + dense_per_token),
        )
    return Plan(
        model=acc.source,
        arch=f.arch,
        limits=limits,
        verdict=verdict,
        verdict_text=verdict.text,
        reason=reason,
        gpu_layers=gpu_layers,
        output_on_gpu=output_on_gpu,
        ngl=ngl,
        cpu_moe_layers=cpu_moe if use_gpu else layers,
        demand_mmap=demand,
        args=args,
        env=env,
        budget=vram_lines + anon_lines + file_lines,
        vram_total=vram_total,
        ram_anon=ram_anon,
        ram_file=ram_file,
        ram_min_file=ram_min_file,
        groups=dict(acc.groups),
        tensor_data_bytes=acc.tensor_data_bytes,
        roofline=roofline,
        assumptions={
            "device": limits.device,
            "device_fixed_bytes": device_fixed,
            "device_host_bytes": device_host,
            "process_bytes": process_bytes(f),
            "vram_margin": VRAM_MARGIN,
            "ram_margin": RAM_MARGIN,
            "kv_cache_type": "f16",
            "compute_buffer": "n_ubatch x 4 B x (vocab + 16 embd + 3 used x expert width)",
        },
    )


def predicted_peak_bytes(
    acc: Accounting,
    ram_bytes: int,
    ctx: int = 4096,
    n_ubatch: int = 512,
    prompt_tokens: int | None = None,
    experts: Iterable[tuple[int, int]] | None = None,
    cache: CachePeak | None = None,
    vram_bytes: int = 0,
    device: str = CUDA,
) -> int:
    """Predicted cgroup memory peak of a llama.cpp run of this model under `ram_bytes`:
    anonymous memory plus the model file's resident pages (`appliance.planner.pages`: all of
    them, or for a demand-mapped run only the `experts` its router chose, and with the engine's
    expert cache only those it holds at most, `cache`, whose readers' buffers are anonymous
    memory too), capped by the limit (file pages beyond it are reclaimed rather than charged);
    a demand-mapped run's token embeddings count only the rows of at most `ctx` tokens. The
    compute buffer is touched only as far as the largest batch actually decoded, so a known
    prompt length narrows it; the output buffer holds a logits row for every prompt token (the
    tracer asks for them all; unknown: one ubatch's), and the mapped file pages cost their page
    tables. With `vram_bytes` of a `device` the model is placed as the planner places it there,
    and the peak is the larger of the load's (`loading_bytes`) and the run's, which under demand
    mmap holds host pages only (planner.pages). For the runner's predicted-versus-measured
    table."""
    touched_ubatch = min(n_ubatch, prompt_tokens) if prompt_tokens else n_ubatch
    limits = PlanLimits(
        ram_bytes=ram_bytes,
        vram_bytes=vram_bytes,
        ctx=ctx,
        n_ubatch=max(touched_ubatch, 1),
        n_outputs=max(prompt_tokens or n_ubatch, 1),
        device=device,
    )
    plan = make_plan(acc, limits)
    layers = acc.facts.layers + acc.facts.nextn_layers
    placed = Offload.of_ngl(layers, plan.ngl, plan.cpu_moe_layers) if plan.ngl else None
    demand = experts is not None
    offload = placed if demand else None
    tokens = (
        None if experts is None else ctx
    )  # a demand-mapped run reads embedding rows of at most ctx tokens
    if cache is None:
        pages = resident_file_bytes(acc, experts, tokens, offload=offload)
        running = pages + page_table_bytes(pages)
    else:
        chosen = list(experts or ())
        held_pages = max(resident_file_bytes(acc, chosen, tokens, held, offload) for held in cache.held)
        running = cache.reader_bytes + held_pages + page_table_bytes(held_pages)
    loading = 0 if placed is None else loading_bytes(acc, placed, demand, device)
    return min(ram_bytes, plan.ram_anon + max(running, loading))


def loading_bytes(acc: Accounting, placed: Offload, demand: bool, device: str) -> int:
    """What a run with a device holds beside its anonymous memory while it uploads: the file's
    pages read so far (under demand mmap those of the device's tensors, dropped after the load;
    without it every page, populated before the upload) and, on the stand-in, the message the
    engine's RPC client builds for the tensor it sends (a copy of it, in the engine's memory):
    the largest, or under demand mmap the bound on what a message adds to the pages read before
    it (upload_message_bytes)."""
    pages = device_file_bytes(acc, placed) if demand else resident_file_bytes(acc)
    message = 0
    if device == RPC:
        largest = max((t.nbytes for t in placed.tensors(acc)), default=0)
        message = upload_message_bytes(acc, placed) if demand else largest
    return pages + page_table_bytes(pages) + message
