"""CLI: `appliance plan`."""

import json
from pathlib import Path

import click

from appliance.byte_sizes import format_size, parse_size
from appliance.cli.options import json_option
from appliance.errors import ApplianceError
from appliance.gguf_accounting import GROUP_TITLES, Accounting, account_file, account_source
from appliance.gguf_remote import HttpRangeSource, stderr_progress
from appliance.planner import Limits, Plan, make_plan


def resolve_vram(text: str) -> tuple[int, str]:
    """Bytes of VRAM to plan with, and where the number came from."""
    if text != "auto":
        return parse_size(text), "given"
    from appliance.gpu import NvmlUnavailable, detect_gpus

    try:
        gpus = detect_gpus()
    except NvmlUnavailable as exc:
        return 0, f"auto: no NVIDIA GPU visible ({exc}); planning CPU-only, as --vram 0"
    if not gpus:
        return 0, "auto: NVML reports no GPU; planning CPU-only, as --vram 0"
    return gpus[0].free_bytes, f"auto: free memory of GPU 0 ({gpus[0].name}) via NVML"


def load_accounting(model: str, quiet: bool) -> tuple[Accounting, str]:
    if model.startswith(("http://", "https://")):
        source = HttpRangeSource(model, progress=None if quiet else stderr_progress)
        acc = account_source(source)
        if not quiet:
            click.echo("", err=True)
        return acc, (f"header read over HTTP: {source.bytes_fetched} bytes in "
                     f"{source.requests} range requests")
    path = Path(model)
    if not path.is_file():
        raise ApplianceError(f"{model}: no such file (give a GGUF path or an http(s) URL)")
    acc = account_file(path)
    how = ("header-only file: sizes come from the tensor infos" if acc.partial
           else "local file: header read, weights not touched")
    return acc, how


def ceiling(tps: float | None) -> str:
    return "not bound by this tier (no bytes per token)" if tps is None else f"{tps:.2f} tokens/s"


def render(acc: Accounting, plan: Plan, how: str, vram_note: str) -> str:
    f, lim = acc.facts, plan.limits
    out = [f"plan for {acc.source}",
           f"  {f.arch}: {f.layers} layers ({len(f.attention_layers)} attention, "
           f"{len(f.recurrent_layers)} recurrent), {f.experts} experts, {f.experts_used} per "
           f"token, embedding {f.embedding}, vocab {f.vocab}; {how}",
           f"  limits: RAM {format_size(lim.ram_bytes)}, VRAM {format_size(lim.vram_bytes)} "
           f"({vram_note}), ctx {lim.ctx}",
           "", f"model bytes by group (tensor data {acc.tensor_data_bytes} bytes):"]
    for group, n in acc.groups.items():
        if n:
            out.append(f"  {GROUP_TITLES[group]:<26} {format_size(n):>12}  {n:>14}")
    out.append(f"  {'alignment padding':<26} {format_size(acc.padding_bytes):>12}  "
               f"{acc.padding_bytes:>14}")
    out += ["", f"verdict: {plan.verdict_text}", f"  {plan.reason}", "", "llama.cpp:"]
    env = " ".join(f"{k}={v}" for k, v in plan.env.items())
    out.append("  " + (env + " " if env else "") + "llama-completion " + " ".join(plan.args))
    out += ["", "budget:", f"  {'tier':<5} {'item':<58} {'bytes':>12}  note"]
    for line in plan.budget:
        out.append(f"  {line.tier:<5} {line.item:<58} {format_size(line.bytes):>12}  {line.note}")
    if lim.vram_bytes:
        out.append(f"  VRAM total {format_size(plan.vram_total)} of {format_size(lim.vram_bytes)}")
    out.append(f"  RAM: anonymous {format_size(plan.ram_anon)} + model file pages "
               f"{format_size(plan.ram_file)} (at least {format_size(plan.ram_min_file)}) "
               f"against {format_size(lim.ram_bytes)}")
    r = plan.roofline
    if r is not None:
        out += ["", "decode roofline (routed experts in host memory):",
                f"  routed expert bytes per token from host tiers: "
                f"{format_size(r.routed_bytes_per_token)}",
                f"  page cache for model pages: {format_size(r.page_cache_bytes)} for "
                f"{format_size(r.expert_bytes_on_host)} of host experts "
                f"(uniform-use hit rate {r.uniform_hit_rate:.1%})",
                f"  storage {lim.ssd_gbps:g} GB/s, every expert byte read: "
                f"{ceiling(r.ssd_cold_tps)}",
                f"  storage {lim.ssd_gbps:g} GB/s, uniform-use hit rate: "
                f"{ceiling(r.ssd_uniform_tps)}"]
        if lim.hit_rate is not None:
            out.append(f"  storage, measured hit rate {lim.hit_rate:.1%}: "
                       f"{ceiling(r.ssd_measured_tps)}")
        out += [f"  PCIe {lim.pcie_gbps:g} GB/s (streaming host experts to the GPU): "
                f"{ceiling(r.pcie_tps)}",
                f"  RAM {lim.ram_gbps:g} GB/s (host experts resident): {ceiling(r.ram_tps)}"]
    out += ["", "estimates: " + "; ".join(f"{k}={v}" for k, v in plan.assumptions.items())]
    return "\n".join(out)


@click.command("plan")
@click.argument("model")
@click.option("--ram", "ram_text", required=True, help="Host memory limit, e.g. 8GiB.")
@click.option("--vram", "vram_text", default="auto", show_default=True,
              help="GPU memory: a size, 0 for CPU-only, or auto (free memory via NVML).")
@click.option("--ctx", default=4096, show_default=True, help="Context size (tokens).")
@click.option("--ubatch", default=512, show_default=True, help="Physical batch size.")
@click.option("--ssd-gbps", default=7.0, show_default=True, help="Storage read GB/s.")
@click.option("--pcie-gbps", default=25.0, show_default=True, help="Host-to-GPU GB/s.")
@click.option("--ram-gbps", default=60.0, show_default=True, help="Host memory GB/s.")
@click.option("--hit-rate", type=click.FloatRange(0, 1), default=None,
              help="Expert-cache hit rate measured by a trace replay.")
@json_option
def plan_command(model: str, ram_text: str, vram_text: str, ctx: int, ubatch: int,
                 ssd_gbps: float, pcie_gbps: float, ram_gbps: float, hit_rate: float | None,
                 as_json: bool) -> None:
    """Plan placement and memory for a GGUF (path, header-only file or URL) under limits."""
    vram, vram_note = resolve_vram(vram_text)
    limits = Limits(ram_bytes=parse_size(ram_text), vram_bytes=vram, ctx=ctx, n_ubatch=ubatch,
                    ssd_gbps=ssd_gbps, pcie_gbps=pcie_gbps, ram_gbps=ram_gbps,
                    hit_rate=hit_rate)
    acc, how = load_accounting(model, quiet=as_json)
    plan = make_plan(acc, limits)
    if as_json:
        doc = {"plan": plan.to_dict(), "accounting": acc.summary(), "source_note": how,
               "vram_note": vram_note}
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render(acc, plan, how, vram_note))
    if plan.verdict == "does_not_start":
        raise ApplianceError(f"plan: does not start: {plan.reason}")


COMMANDS: list[click.Command] = [plan_command]
