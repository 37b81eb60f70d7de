"""CLI: `appliance plan`."""

import click

from appliance.cli.options import FRACTION, POSITIVE, RATE, json_option, strict_json
from appliance.cli.progress import progress_display
from appliance.core.errors import ApplianceError
from appliance.core.units import parse_size
from appliance.planner.plan import PlanLimits, PlanVerdict, make_plan
from appliance.planner.render import load_accounting, render, resolve_vram


@click.command("plan")
@click.argument("model")
@click.option("--ram", "ram_text", required=True, help="Host memory limit, e.g. 8GiB.")
@click.option(
    "--vram",
    "vram_text",
    default="auto",
    show_default=True,
    help="GPU memory: a size, 0 for CPU-only, or auto (free memory via NVML).",
)
@click.option("--ctx", type=POSITIVE, default=4096, show_default=True, help="Context size (tokens).")
@click.option("--ubatch", type=POSITIVE, default=512, show_default=True, help="Physical batch size.")
@click.option("--ssd-gbps", type=RATE, default=7.0, show_default=True, help="Storage read GB/s.")
@click.option("--pcie-gbps", type=RATE, default=25.0, show_default=True, help="Host-to-GPU GB/s.")
@click.option("--ram-gbps", type=RATE, default=60.0, show_default=True, help="Host memory GB/s.")
@click.option(
    "--hit-rate", type=FRACTION, default=None, help="Expert-cache hit rate measured by a trace replay."
)
@json_option
def plan_command(
    model: str,
    ram_text: str,
    vram_text: str,
    ctx: int,
    ubatch: int,
    ssd_gbps: float,
    pcie_gbps: float,
    ram_gbps: float,
    hit_rate: float | None,
    as_json: bool,
) -> None:
    """Plan placement and memory for a GGUF (path, header-only file or URL) under limits."""
    vram, vram_note = resolve_vram(vram_text)
    limits = PlanLimits(
        ram_bytes=parse_size(ram_text),
        vram_bytes=vram,
        ctx=ctx,
        n_ubatch=ubatch,
        ssd_gbps=ssd_gbps,
        pcie_gbps=pcie_gbps,
        ram_gbps=ram_gbps,
        hit_rate=hit_rate,
    )
    remote = model.startswith(("http://", "https://"))  # only a remote read reports progress
    with progress_display(quiet=as_json or not remote) as show:
        acc, how = load_accounting(model, progress=show)
    plan = make_plan(acc, limits)
    if as_json:
        doc = {
            "plan": plan.to_dict(),
            "accounting": acc.summary(),
            "source_note": how,
            "vram_note": vram_note,
        }
        click.echo(strict_json(doc, indent=2))
    else:
        click.echo(render(acc, plan, how, vram_note))
    if plan.verdict is PlanVerdict.DOES_NOT_START:
        raise ApplianceError(f"plan: does not start: {plan.reason}")


COMMANDS: list[click.Command] = [plan_command]
