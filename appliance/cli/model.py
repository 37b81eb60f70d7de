"""CLI: `appliance model`."""

from pathlib import Path

import click

from appliance.cli.options import POSITIVE, SEED, OutputPath, finite, json_option, strict_json
from appliance.cli.progress import progress_display
from appliance.core.units import format_size, parse_size
from appliance.models.shapes import ARCHES, EXPERT_TYPES, ModelSynthSpec
from appliance.models.skeleton import write_skeleton
from appliance.models.synth import synthesize


@click.group("model")
def model_group() -> None:
    """Synthesize tiny MoE GGUF models and inspect GGUF files."""


@model_group.command("synth")
@click.argument("out", type=OutputPath())
@click.option("--arch", type=click.Choice(ARCHES), required=True)
@click.option(
    "--size",
    "size_text",
    default="400MiB",
    show_default=True,
    help="Largest file size; the expert width is chosen to come close to it.",
)
@click.option("--experts", type=POSITIVE, default=64, show_default=True, help="Routed experts per layer.")
@click.option("--used", type=POSITIVE, default=8, show_default=True, help="Experts chosen per token.")
@click.option("--layers", type=POSITIVE, default=4, show_default=True, help="MoE layers.")
@click.option(
    "--skew",
    type=finite(min=0),
    default=1.0,
    show_default=True,
    help="Router structure: 0 uniform random, 1 heavy-tailed with strong locality.",
)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option(
    "--type",
    "expert_type",
    type=click.Choice(sorted(EXPERT_TYPES)),
    default="f16",
    show_default=True,
    help="Type of the expert tensors.",
)
@json_option
def synth_command(
    out: Path,
    arch: str,
    size_text: str,
    experts: int,
    used: int,
    layers: int,
    skew: float,
    seed: int,
    expert_type: str,
    as_json: bool,
) -> None:
    """Write a tiny synthetic MoE GGUF that llama.cpp loads and runs (same seed, same bytes)."""
    spec = ModelSynthSpec(
        arch=arch,
        size_bytes=parse_size(size_text),
        experts=experts,
        used=used,
        layers=layers,
        skew=skew,
        seed=seed,
        expert_type=expert_type,
    )
    with progress_display(quiet=as_json) as progress:
        result = synthesize(spec, out, progress)
    for stale in result.stale_removed:
        click.echo(f"removed {stale}, left by an earlier synth that was killed", err=True)
    record = {
        "path": str(result.path),
        "size_bytes": result.size_bytes,
        "sha256": result.sha256,
        "arch": arch,
        "experts": experts,
        "used": used,
        "layers": layers,
        "skew": skew,
        "seed": seed,
        "type": expert_type,
        "expert_ff": result.expert_ff,
        "expert_bytes": result.expert_bytes,
    }
    if as_json:
        click.echo(strict_json(record, indent=2))
        return
    click.echo(
        f"wrote {result.path}: {format_size(result.size_bytes)} "
        f"({result.size_bytes} bytes), {arch}, {layers} layers x {experts} experts "
        f"({used} per token), expert width {result.expert_ff}, "
        f"{100 * result.expert_bytes / result.size_bytes:.1f}% of bytes in experts"
    )
    click.echo(f"sha256 {result.sha256}")


@model_group.command("skeleton")
@click.argument(
    "input_path", metavar="INPUT.json", type=click.Path(path_type=Path, dir_okay=False, exists=True)
)
@click.argument("out", type=OutputPath())
def skeleton_command(input_path: Path, out: Path) -> None:
    """Write a header-only GGUF (no weights) from a published configuration, for planning."""
    data_bytes = write_skeleton(input_path, out)
    click.echo(
        f"wrote {out}: {format_size(out.stat().st_size)} header for "
        f"{format_size(data_bytes)} ({data_bytes} bytes) of tensor data; "
        "header only, not loadable"
    )


COMMANDS: list[click.Command] = [model_group]
