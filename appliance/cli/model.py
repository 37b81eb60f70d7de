"""CLI: `appliance model`."""

from pathlib import Path

import click

from appliance.cli.options import POSITIVE, SEED, OutputPath, finite, json_option, strict_json
from appliance.cli.progress import progress_display
from appliance.core.errors import ApplianceError
from appliance.core.units import format_size, parse_size
from appliance.models.full_synth import DEFAULT_ROUTER, ROUTERS, digest_like, synthesize_like
from appliance.models.shapes import ARCHES, EXPERT_TYPES, ModelSynthSpec
from appliance.models.skeleton import write_skeleton
from appliance.models.synth import synthesize

ROUTER_OPTION = click.option(
    "--router",
    "router_design",
    type=click.Choice(ROUTERS),
    default=DEFAULT_ROUTER,
    show_default=True,
    help=(
        "With --like: walk, routing calibrated to real models' (a token walk the decoding "
        "follows, centered random blocks); zipf, the format-1 design (popularity only, far more "
        "reuse than real routing), which the pinned shape profiles were made with."
    ),
)


@click.group("model")
def model_group() -> None:
    """Synthesize MoE GGUF models (tiny, or full size from a skeleton input) and header-only GGUFs."""


@model_group.command("synth")
@click.argument("out", type=OutputPath())
@click.option(
    "--like",
    "like",
    metavar="INPUT.json",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Full size: the tensors, shapes and types of this skeleton input (evidence/plans/).",
)
@click.option("--arch", type=click.Choice(ARCHES), help="Tiny model: the architecture.")
@click.option(
    "--size",
    "size_text",
    help="Tiny model: largest file size; the expert width is chosen to come close to it.  [default: 400MiB]",
)
@click.option("--experts", type=POSITIVE, help="Tiny model: routed experts per layer.  [default: 64]")
@click.option(
    "--used",
    type=POSITIVE,
    help="Experts chosen per token (tiny default 8); with --like, in place of the input's (1..its experts).",
)
@click.option(
    "--layers",
    type=POSITIVE,
    help="MoE layers (tiny default 4); with --like, the first N layers at full width (default all).",
)
@click.option(
    "--skew",
    type=finite(min=0),
    default=1.0,
    show_default=True,
    help=(
        "Router popularity: 0 none, 1 the calibrated tail (tiny models: inside real routing's "
        "range at 128 experts, k = 4; --like: with --router walk, calibrated at the input's "
        "shape). docs/trace-format.md."
    ),
)
@ROUTER_OPTION
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option(
    "--type",
    "expert_type",
    type=click.Choice(sorted(EXPERT_TYPES)),
    help="Tiny model: type of the expert tensors.  [default: f16]",
)
@json_option
def synth_command(
    out: Path,
    like: Path | None,
    arch: str | None,
    size_text: str | None,
    experts: int | None,
    used: int | None,
    layers: int | None,
    skew: float,
    router_design: str,
    seed: int,
    expert_type: str | None,
    as_json: bool,
) -> None:
    """Write a synthetic MoE GGUF that llama.cpp loads and runs (same seed, same bytes): a tiny
    one (--arch), or a full-size one with the tensor plan of a skeleton input (--like)."""
    if like is not None:
        tiny = {
            "--arch": arch,
            "--size": size_text,
            "--experts": experts,
            "--type": expert_type,
        }
        given = [name for name, value in tiny.items() if value is not None]
        if given:
            verb = "describes" if len(given) == 1 else "describe"
            raise ApplianceError(
                f"{', '.join(given)} {verb} a tiny model; --like takes its shape from {like}"
            )
        synth_like(like, out, seed, skew, layers, used, router_design, as_json)
        return
    if arch is None:
        raise ApplianceError("give --arch (a tiny model) or --like INPUT.json (a full-size one)")
    if router_design != DEFAULT_ROUTER:
        raise ApplianceError("--router chooses the design of a --like model; a tiny model has its own")
    spec = ModelSynthSpec(
        arch=arch,
        size_bytes=parse_size(size_text or "400MiB"),
        experts=experts or 64,
        used=used or 8,
        layers=layers or 4,
        skew=skew,
        seed=seed,
        expert_type=expert_type or "f16",
    )
    with progress_display(quiet=as_json) as progress:
        result = synthesize(spec, out, progress)
    record = {
        "path": str(result.path),
        "size_bytes": result.size_bytes,
        "sha256": result.sha256,
        "arch": arch,
        "experts": spec.experts,
        "used": spec.used,
        "layers": spec.layers,
        "skew": skew,
        "seed": seed,
        "type": spec.expert_type,
        "expert_ff": result.expert_ff,
        "expert_bytes": result.expert_bytes,
    }
    summary = (
        f"{arch}, {spec.layers} layers x {spec.experts} experts ({spec.used} per token), "
        f"expert width {result.expert_ff}"
    )
    echo_written(record, result.stale_removed, summary, result.expert_bytes, as_json)


def echo_written(
    record: dict[str, object], stale: tuple[Path, ...], summary: str, expert_bytes: int, as_json: bool
) -> None:
    """What a synth wrote: the record as JSON, or a summary line and the sha256."""
    for path in stale:
        click.echo(f"removed {path}, left by an earlier synth that was killed", err=True)
    if as_json:
        click.echo(strict_json(record, indent=2))
        return
    size = int(str(record["size_bytes"]))
    click.echo(
        f"wrote {record['path']}: {format_size(size)} ({size} bytes), {summary}, "
        f"{100 * expert_bytes / size:.1f}% of bytes in experts"
    )
    click.echo(f"sha256 {record['sha256']}")


def synth_like(
    like: Path,
    out: Path,
    seed: int,
    skew: float,
    layers: int | None,
    used: int | None,
    router_design: str,
    as_json: bool,
) -> None:
    with progress_display(quiet=as_json) as progress:
        result = synthesize_like(
            like,
            out,
            seed=seed,
            skew=skew,
            layers=layers,
            progress=progress,
            used=used,
            router_design=router_design,
        )
    record = {
        "path": str(result.path),
        "size_bytes": result.size_bytes,
        "sha256": result.sha256,
        "like": like.name,
        "arch": result.arch,
        "layers": result.layers,
        "used": result.used,
        "tensors": result.tensors,
        "skew": skew,
        "router": router_design,
        "seed": seed,
        "expert_bytes": result.expert_bytes,
    }
    summary = (
        f"{result.arch} like {like.name}, {result.layers} layers ({result.used} experts per token), "
        f"{result.tensors} tensors, {router_design} router"
    )
    echo_written(record, result.stale_removed, summary, result.expert_bytes, as_json)


@model_group.command("digest")
@click.option(
    "--like",
    "like",
    metavar="INPUT.json",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="The skeleton input, as for `model synth --like`.",
)
@click.option("--layers", type=POSITIVE, help="The first N layers at full width (default all).")
@click.option("--used", type=POSITIVE, help="Experts chosen per token in place of the input's.")
@click.option("--skew", type=finite(min=0), default=1.0, show_default=True, help="As for `model synth`.")
@ROUTER_OPTION
@click.option("--seed", type=SEED, default=0, show_default=True)
@json_option
def digest_command(
    like: Path,
    layers: int | None,
    used: int | None,
    skew: float,
    router_design: str,
    seed: int,
    as_json: bool,
) -> None:
    """The size and sha256 `model synth --like` would write with these options, without writing
    the file: the same stream, hashed only (to pin a full-size model at no disk cost)."""
    with progress_display(quiet=as_json) as progress:
        size, sha256 = digest_like(
            like,
            seed=seed,
            skew=skew,
            layers=layers,
            progress=progress,
            used=used,
            router_design=router_design,
        )
    if as_json:
        click.echo(strict_json({"like": like.name, "size_bytes": size, "sha256": sha256}, indent=2))
        return
    click.echo(f"{like.name}: {size} bytes, sha256 {sha256} (nothing written)")


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
