"""A plan as text: what `appliance plan` prints and what the reference plans record."""

from pathlib import Path

from appliance.core.errors import ApplianceError
from appliance.core.progress import ProgressFn
from appliance.core.units import format_size, parse_size
from appliance.planner.accounting import GROUP_TITLES, Accounting, account_file, account_source
from appliance.planner.plan import Plan
from appliance.planner.remote import HttpRangeSource


def resolve_vram(text: str) -> tuple[int, str]:
    """Bytes of VRAM to plan with, and where the number came from."""
    if text != "auto":
        return parse_size(text), "given"
    from appliance.host.gpu import NvmlUnavailable, detect_gpus

    try:
        gpus = detect_gpus()
    except NvmlUnavailable as exc:
        return 0, f"auto: no NVIDIA GPU visible ({exc}); planning CPU-only, as --vram 0"
    if not gpus:
        return 0, "auto: NVML reports no GPU; planning CPU-only, as --vram 0"
    return gpus[0].free_bytes, f"auto: free memory of GPU 0 ({gpus[0].name}) via NVML"


def load_accounting(model: str, progress: ProgressFn | None = None) -> tuple[Accounting, str]:
    """The accounting of a GGUF path or URL, and a note on how its header was read."""
    if model.startswith(("http://", "https://")):
        source = HttpRangeSource(model, progress=progress)
        acc = account_source(source)
        return acc, (
            f"header read over HTTP: {source.bytes_fetched} bytes in {source.requests} range requests"
        )
    path = Path(model)
    if not path.is_file():
        raise ApplianceError(f"{model}: no such file (give a GGUF path or an http(s) URL)")
    acc = account_file(path)
    how = (
        "header-only file: sizes come from the tensor infos"
        if acc.partial
        else "local file: header read, weights not touched"
    )
    return acc, how


def ceiling(tps: float | None) -> str:
    return "not bound by this tier (no bytes per token)" if tps is None else f"{tps:.2f} tokens/s"


def render(acc: Accounting, plan: Plan, how: str, vram_note: str) -> str:
    f, lim = acc.facts, plan.limits
    out = [
        f"plan for {acc.source}",
        f"  {f.arch}: {f.layers} layers ({len(f.attention_layers)} attention, "
        f"{len(f.recurrent_layers)} recurrent), {f.experts} experts, {f.experts_used} per "
        f"token, embedding {f.embedding}, vocab {f.vocab}; {how}",
        f"  limits: RAM {format_size(lim.ram_bytes)}, VRAM {format_size(lim.vram_bytes)} "
        f"({vram_note}), ctx {lim.ctx}",
        "",
        f"model bytes by group (tensor data {acc.tensor_data_bytes} bytes):",
    ]
    for group, n in acc.groups.items():
        if n:
            out.append(f"  {GROUP_TITLES[group]:<26} {format_size(n):>12}  {n:>14}")
    out.append(f"  {'alignment padding':<26} {format_size(acc.padding_bytes):>12}  {acc.padding_bytes:>14}")
    out += ["", f"verdict: {plan.verdict_text}", f"  {plan.reason}", "", "llama.cpp:"]
    env = " ".join(f"{k}={v}" for k, v in plan.env.items())
    out.append("  " + (env + " " if env else "") + "llama-completion " + " ".join(plan.args))
    out += ["", "budget:", f"  {'tier':<5} {'item':<58} {'bytes':>12}  note"]
    for line in plan.budget:
        out.append(f"  {line.tier:<5} {line.item:<58} {format_size(line.bytes):>12}  {line.note}")
    if lim.vram_bytes:
        out.append(f"  VRAM total {format_size(plan.vram_total)} of {format_size(lim.vram_bytes)}")
    out.append(
        f"  RAM: anonymous {format_size(plan.ram_anon)} + model file pages "
        f"{format_size(plan.ram_file)} (at least {format_size(plan.ram_min_file)}) "
        f"against {format_size(lim.ram_bytes)}"
    )
    r = plan.roofline
    if r is not None:
        out += [
            "",
            "decode roofline (routed experts in host memory):",
            f"  routed expert bytes per token from host tiers: {format_size(r.routed_bytes_per_token)}",
            f"  page cache for model pages: {format_size(r.page_cache_bytes)} for "
            f"{format_size(r.expert_bytes_on_host)} of host experts "
            f"(uniform-use hit rate {r.uniform_hit_rate:.1%})",
            f"  storage {lim.ssd_gbps:g} GB/s, every expert byte read: {ceiling(r.ssd_cold_tps)}",
            f"  storage {lim.ssd_gbps:g} GB/s, uniform-use hit rate: {ceiling(r.ssd_uniform_tps)}",
        ]
        if lim.hit_rate is not None:
            out.append(f"  storage, measured hit rate {lim.hit_rate:.1%}: {ceiling(r.ssd_measured_tps)}")
        out += [
            f"  PCIe {lim.pcie_gbps:g} GB/s (streaming host experts to the GPU): {ceiling(r.pcie_tps)}",
            f"  RAM {lim.ram_gbps:g} GB/s (host experts resident): {ceiling(r.ram_tps)}",
        ]
    out += ["", "estimates: " + "; ".join(f"{k}={v}" for k, v in plan.assumptions.items())]
    return "\n".join(out)
