"""CLI: `appliance trace` -- inspect, synthesize and replay MoE route traces."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from appliance.cli.options import (
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    SEED,
    OutputPath,
    finite,
    json_option,
    strict_json,
)
from appliance.core import atomic
from appliance.core.errors import ApplianceError, ConfigError
from appliance.trace.names import ADMISSIONS, EXPORT_FORMATS, IMPORT_FORMATS, POLICIES, ROUTING_KNOBS

if TYPE_CHECKING:
    from appliance.trace.format import Trace
    from appliance.trace.replay import ReplaySetup

SCOPE = click.Choice(["per-layer", "global"])
ENGINES = ("appliance", "libcachesim")


def _emit(data: dict[str, Any]) -> None:
    click.echo(strict_json(data, indent=2, sort_keys=False))


def _split(values: tuple[str, ...]) -> list[str]:
    return [part for value in values for part in value.split(",") if part]


MAX_CAPACITY = 1 << 31
MAX_BUDGET_BYTES = 1 << 50  # a byte budget (1 PiB): far above any model, far below int64


def _capacities(values: tuple[str, ...]) -> list[int]:
    out = []
    for part in _split(values):
        try:
            capacity = int(part)
        except ValueError:
            raise ConfigError(f"capacity must be a whole number of experts, got {part!r}") from None
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ConfigError(f"capacity must be from 1 to {MAX_CAPACITY} experts, got {part}")
        out.append(capacity)
    return out


def _budget(part: str) -> int:
    from appliance.core.units import HINT, SizeError, parse_size

    try:
        budget = parse_size(part)
    except SizeError:
        raise ConfigError(
            f"capacity {part!r} is neither a whole number of experts nor a byte budget: {HINT}"
        ) from None
    if budget > MAX_BUDGET_BYTES:
        raise ConfigError(f"a byte budget must be at most {MAX_BUDGET_BYTES} bytes, got {part} ({budget})")
    return budget


def _capacities_and_budgets(values: tuple[str, ...]) -> tuple[list[int], list[int]]:
    """Expert counts (plain numbers) and byte budgets (sizes with a unit: 4GiB, 3000MiB)."""
    parts = _split(values)
    sized = [part for part in parts if any(c.isalpha() for c in part)]
    counts = _capacities(tuple(part for part in parts if part not in sized))
    return counts, [_budget(part) for part in sized]


def _setup(
    trace_path: Path,
    expert_bytes: str | None,
    model: Path | None,
    calibration: Path | None,
    row_order: bool = False,
) -> tuple[Trace, ReplaySetup]:
    from appliance.trace.events import trace_events
    from appliance.trace.expert_bytes import expert_bytes_from_gguf, expert_bytes_from_header
    from appliance.trace.format import read_trace
    from appliance.trace.replay import ReplaySetup, uniform_expert_bytes

    trace = read_trace(trace_path)
    per_layer: dict[int, int] | None = None
    if expert_bytes is None and model is not None:
        expert_bytes = "auto"
    if expert_bytes is None:  # the trace's own sizes, when its source recorded them
        per_layer = expert_bytes_from_header(trace.header)
    elif expert_bytes == "auto":
        if model is None:
            raise ConfigError("--expert-bytes auto needs --model GGUF to read expert sizes from")
        per_layer = expert_bytes_from_gguf(model, trace.header)
    elif expert_bytes is not None:
        try:
            per_layer = uniform_expert_bytes(trace.moe_layers, int(expert_bytes))
        except ValueError:
            raise ConfigError(
                f"--expert-bytes must be 'auto' or a number of bytes, got {expert_bytes!r}"
            ) from None
    calib = trace_events(read_trace(calibration)) if calibration else None
    events = trace_events(trace, row_order=row_order)
    setup = ReplaySetup(events=events, k=trace.k, expert_bytes=per_layer, calibration=calib)
    return trace, setup


def _policies(values: tuple[str, ...]) -> list[str]:
    names = _split(values) or list(POLICIES)
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ConfigError(f"unknown policy {unknown[0]!r}; choose from {', '.join(POLICIES)}")
    return names


@click.group("trace")
def trace_group() -> None:
    """Inspect and replay MoE route traces through expert-cache policies."""


@trace_group.command("info")
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@json_option
def info_cmd(trace_path: Path, as_json: bool) -> None:
    """Model, layers, experts, steps, tokens, reuse distances per layer, decode locality."""
    from appliance.trace.format import read_trace
    from appliance.trace.info import trace_info

    info = trace_info(read_trace(trace_path))
    if as_json:
        _emit(info)
        return
    click.echo(f"model      {info['model_file']} ({info['arch']})")
    click.echo(f"layers     {info['n_layers']} blocks, {info['moe_layers']} MoE")
    click.echo(f"experts    {info['n_experts']} per layer, {info['n_expert_used']} per token")
    click.echo(
        f"steps      {info['steps']} ({info['prompt_tokens']} prompt tokens, "
        f"{info['decode_tokens']} decode tokens)"
    )
    click.echo(f"requests   {info['requests']} in {info['events']} events")
    click.echo("layer  requests  distinct  first  reuse p50  p90  p99")
    for row in info["layers"]:
        r = row["reuse_distance"]
        click.echo(
            f"{row['layer']:>5}  {row['requests']:>8}  {row['distinct_experts']:>8}  "
            f"{row['first_touches']:>5}  {r['p50']!s:>9}  {r['p90']!s:>4}  {r['p99']!s:>4}"
        )
    click.echo("locality of the decode tokens (docs/trace-format.md, Locality)")
    for label, value in locality_lines(info["locality"]):
        click.echo(f"  {label:<28} {value}")
    reuse = "  ".join(
        f"{r['layer']}:{_pct(r['reuse'])}" for r in info["locality"]["next_token_reuse"]["per_layer"]
    )
    click.echo(f"  next-token reuse per layer   {reuse}")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def locality_lines(loc: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) lines of a trace's locality statistics, as info and compare print them."""
    hot = loc["hottest_over_uniform"]
    lines = [
        ("decode tokens", str(loc["decode_tokens"])),
        ("pairs touched", f"{_pct(loc['pairs_touched'])} of {loc['pairs']}"),
        ("hottest / uniform", "-" if hot is None else f"{hot:.1f}"),
        ("next-token reuse", _pct(loc["next_token_reuse"]["overall"])),
    ]
    lines += [(f"reuse distance {b['distance']}", _pct(b["share"])) for b in loc["reuse_distance"]]
    for row in loc["hit_rates"]:
        share = f"{100 * row['share']:.0f}%"
        for policy in ("lru", "belady"):
            lines.append((f"{policy} hits at {share} ({row['capacity']})", _pct(row[policy])))
    return lines


@trace_group.command("synth")
@click.argument("out", type=OutputPath())
@click.option("--layers", type=POSITIVE, default=4, show_default=True, help="MoE layers.")
@click.option("--experts", type=POSITIVE, default=32, show_default=True, help="Routed experts per layer.")
@click.option("--k", "k", type=POSITIVE, default=4, show_default=True, help="Experts per token.")
@click.option("--prompt", type=NON_NEGATIVE, default=32, show_default=True, help="Prompt tokens.")
@click.option("--ubatch", type=POSITIVE, default=16, show_default=True, help="Prompt micro-batch size.")
@click.option("--decode", type=NON_NEGATIVE, default=64, show_default=True, help="Decode steps.")
@click.option(
    "--skew", type=finite(min=0), default=1.0, show_default=True, help="Zipf exponent of popularity."
)
@click.option(
    "--correlation",
    type=FRACTION,
    default=0.3,
    show_default=True,
    help="Probability a token re-uses the previous token's expert in a slot.",
)
@click.option(
    "--recall",
    type=FRACTION,
    default=0.0,
    show_default=True,
    help="Probability a slot re-uses an expert of an earlier token (after --correlation).",
)
@click.option(
    "--recall-exponent",
    type=finite(min=0),
    default=1.0,
    show_default=True,
    help="A recall reaches d tokens back with weight 1 / d**this.",
)
@click.option(
    "--recall-window",
    type=NON_NEGATIVE,
    default=0,
    show_default=True,
    help="The furthest token back a recall reaches (0: the whole sequence).",
)
@click.option(
    "--recall-tail",
    type=finite(min=0),
    default=0.0,
    show_default=True,
    help="A flat weight added to every recall distance's 1 / d**exponent.",
)
@click.option(
    "--skew-spread",
    type=FRACTION,
    default=0.0,
    show_default=True,
    help="Each layer's skew drawn from skew x (1 +- this).",
)
@click.option(
    "--calibrated",
    is_flag=True,
    help="The shape's routing knobs fitted to the real traces' locality (docs/trace-format.md).",
)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.pass_context
def synth_cmd(
    ctx: click.Context,
    out: Path,
    layers: int,
    experts: int,
    k: int,
    prompt: int,
    ubatch: int,
    decode: int,
    calibrated: bool,
    seed: int,
    **knobs: Any,
) -> None:
    """Write a synthetic trace (deterministic by seed) for tests and benchmarks."""
    from appliance.trace.format import write_trace
    from appliance.trace.synth import TraceSynthSpec, calibrated_knobs, synth_trace

    if calibrated:
        given = [
            "--" + name.replace("_", "-")
            for name in ROUTING_KNOBS
            if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT
        ]
        if given:
            raise ConfigError(f"--calibrated sets the routing knobs itself; drop {', '.join(given)}")
        knobs = calibrated_knobs(layers, experts, k)
    trace = synth_trace(
        TraceSynthSpec(
            n_layers=layers,
            n_experts=experts,
            k=k,
            n_prompt=prompt,
            n_ubatch=ubatch,
            n_decode=decode,
            seed=seed,
            **knobs,
        )
    )
    write_trace(out, trace.header, trace.rows)
    click.echo(f"wrote {out}: {len(trace.rows)} rows, {trace.n_steps} steps")


def _replay_options(func: Any) -> Any:
    options = [
        click.option(
            "--policy",
            "policy",
            multiple=True,
            help=f"Policy (repeat or comma list; default all): {', '.join(POLICIES)}.",
        ),
        click.option(
            "--scope",
            type=SCOPE,
            default="per-layer",
            show_default=True,
            help="One cache per MoE layer, or one pool for all.",
        ),
        click.option(
            "--expert-bytes",
            default=None,
            help="Bytes of one expert, or 'auto' to read them from --model (default: the "
            "trace's own expert_bytes, when it has them).",
        ),
        click.option(
            "--model",
            type=click.Path(path_type=Path),
            default=None,
            help="GGUF the trace was recorded with (for --expert-bytes auto).",
        ),
        click.option(
            "--calibration",
            type=click.Path(path_type=Path),
            default=None,
            help="Trace whose expert frequencies rank static-hot (default: this one).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@trace_group.command("replay")
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option(
    "--capacity",
    "capacity",
    multiple=True,
    required=True,
    help="Experts per cache, or a byte budget with a unit (4GiB, 3000MiB) that every expert "
    "fills with its layer's bytes (repeat or comma list).",
)
@_replay_options
@click.option(
    "--admission",
    type=click.Choice(ADMISSIONS),
    default="during-event",
    show_default=True,
    help="When a layer's misses evict: during-event (ours) or after-event (never the event's "
    "own experts; the published replay of route_trace files). docs/sweeps.md.",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="appliance",
    show_default=True,
    help="appliance: our MoE-atomic replay; libcachesim: libCacheSim's policies (--policy names "
    "them) on the request-level view, printed beside ours.",
)
@json_option
def replay_cmd(
    trace_path: Path,
    capacity: tuple[str, ...],
    policy: tuple[str, ...],
    scope: str,
    expert_bytes: str | None,
    model: Path | None,
    calibration: Path | None,
    admission: str,
    engine: str,
    as_json: bool,
) -> None:
    """Replay TRACE through cache policies: hits, misses, hit rate, bytes moved."""
    from appliance.trace.replay import replay_report

    capacities, budgets = _capacities_and_budgets(capacity)
    lcs_names: list[str] = []
    if engine == "libcachesim":
        from appliance.trace.lcs_replay import check_capacities, check_policies

        if budgets:
            raise ConfigError("--engine libcachesim takes expert counts, not byte budgets")
        lcs_names = check_policies(_split(policy))
        check_capacities(lcs_names, capacities)
        policy = ()
    trace, setup = _setup(trace_path, expert_bytes, model, calibration, admission == "after-event")
    report = replay_report(setup, trace.header, _policies(policy), capacities, scope, budgets, admission)
    theirs = None
    if engine == "libcachesim":
        from appliance.trace.lcs_replay import lcs_report

        theirs = lcs_report(setup.events, lcs_names, capacities, scope)
    if as_json:
        _emit(report if theirs is None else {"appliance": report, "libcachesim": theirs})
        return
    click.echo(
        f"{report['requests']} requests in {report['events']} events, scope {scope}, admission {admission}"
    )
    if theirs is not None:
        click.echo("appliance replay (MoE-atomic events, pins)")
    _table(report["results"])
    if theirs is not None:
        click.echo(f"libCacheSim, {theirs['view']}")
        _table(theirs["results"])


def _table(results: list[dict[str, Any]]) -> None:
    from appliance.core.units import format_size

    click.echo(
        f"{'policy':<12} {'capacity':>11} {'hits':>10} {'misses':>10} {'hit rate':>9} "
        f"{'decode':>7} {'bytes moved':>14}"
    )
    notes = []
    for r in results:
        t = r["total"]
        moved = "-" if t["bytes_moved"] is None else str(t["bytes_moved"])
        rate = "-" if t["hit_rate"] is None else f"{t['hit_rate']:.4f}"
        decode = r.get("decode", {}).get("hit_rate")
        decode_rate = "-" if decode is None else f"{decode:.4f}"
        size = str(r["capacity"]) if "capacity" in r else format_size(r["budget_bytes"])
        policy = r["policy"] + ("*" if r.get("belady", {}).get("optimal") is False else "")
        click.echo(
            f"{policy:<12} {size:>11} {t['hits']:>10} {t['misses']:>10} {rate:>9} {decode_rate:>7} "
            f"{moved:>14}"
        )
        if "belady" in r and r["belady"]["optimal"] is False:
            bound = r["belady"]["hit_bound"]
            limit = (
                ""
                if bound is None
                else (
                    f"; no policy hits more than {bound['hits']} (Belady at {bound['capacity']} experts "
                    "of the smallest size)"
                )
            )
            notes.append(f"* {size}: {r['belady']['meaning']}{limit}")
    for note in dict.fromkeys(notes):
        click.echo(note)


@trace_group.command("import")
@click.argument("source", metavar="FILE", type=click.Path(path_type=Path))
@click.option("--from", "fmt", type=click.Choice(IMPORT_FORMATS), required=True, help="FILE's format.")
@click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="GGUF the routes were recorded with (every format but route-trace-csv, which names its own).",
)
@click.option(
    "--turn",
    type=NON_NEGATIVE,
    default=None,
    help="route-trace-csv: the turn to import (default: 0, or the file's only turn).",
)
@click.option("--out", type=OutputPath(), required=True, help="The .moetrace to write.")
def import_cmd(source: Path, fmt: str, model: Path | None, turn: int | None, out: Path) -> None:
    """Turn another tool's routing record into a .moetrace (the header says what it lacks)."""
    from appliance.trace.expert_bytes import gguf_trace_fields
    from appliance.trace.format import write_trace
    from appliance.trace.interchange import import_trace

    trace = import_trace(source, fmt, gguf_trace_fields(model) if model is not None else None, turn)
    write_trace(out, trace.header, trace.rows)
    missing = ", ".join(trace.header["not_recorded"]) or "nothing"
    click.echo(f"wrote {out}: {len(trace.rows)} rows, {trace.n_steps} steps; not recorded: {missing}")


@trace_group.command("export")
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option("--to", "fmt", type=click.Choice(EXPORT_FORMATS), required=True, help="Format to write.")
@click.option("--out", type=OutputPath(), required=True, help="File to write.")
@click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="GGUF the trace was recorded with (libcachesim: object sizes are its expert bytes; "
    "default: the trace's own expert_bytes, when it has them).",
)
def export_cmd(trace_path: Path, fmt: str, out: Path, model: Path | None) -> None:
    """Write TRACE as llama.cpp's moe-trace CSV or libCacheSim's oracleGeneral binary."""
    from appliance.trace.expert_bytes import expert_bytes_from_gguf, expert_bytes_from_header
    from appliance.trace.format import read_trace
    from appliance.trace.interchange import export_trace

    trace = read_trace(trace_path)
    per_layer = (
        expert_bytes_from_gguf(model, trace.header)
        if model is not None
        else expert_bytes_from_header(trace.header)
    )
    data = export_trace(trace, fmt, per_layer)
    try:
        atomic.write_bytes(out, data)
    except OSError as exc:
        raise ConfigError(f"{out}: cannot write ({exc.strerror})") from None
    click.echo(f"wrote {out}: {len(data)} bytes ({fmt})")


@trace_group.command("routes")
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option("--out", type=OutputPath(), required=True, help="The routes file to write.")
@click.option(
    "--layers",
    type=POSITIVE,
    default=None,
    help="Only the model's first N layers (the routes of a `model synth --layers N` slice).",
)
def routes_cmd(trace_path: Path, out: Path, layers: int | None) -> None:
    """Write TRACE's expert ids as a routes file for `llama-moe-trace --routes-from`."""
    from appliance.core.digests import sha256_bytes
    from appliance.trace.format import read_trace
    from appliance.trace.routes import last_layer_prompt_gap, routes_bytes

    trace = read_trace(trace_path)
    data = routes_bytes(trace, str(trace_path), layers)
    gap = last_layer_prompt_gap(trace)
    if gap and (layers is None or layers == int(trace.header["n_layers"])):
        click.echo(
            f"the last layer routes only the prompt's last token (llama.cpp computed no other "
            f"there): its {gap} earlier prompt tokens get that token's experts",
            err=True,
        )
    try:
        atomic.write_bytes(out, data)
    except OSError as exc:
        raise ConfigError(f"{out}: cannot write ({exc.strerror})") from None
    click.echo(f"wrote {out}: {len(data)} bytes, sha256 {sha256_bytes(data)}")


@trace_group.command("curves")
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=OutputPath(directory=True),
    required=True,
    help="Directory for curves.json, curves.png and heatmap-<policy>.png.",
)
@click.option(
    "--capacity",
    "capacity",
    multiple=True,
    help="Capacities (repeat or comma list; default 16 from k to all experts).",
)
@_replay_options
def curves_cmd(
    trace_path: Path,
    out: Path,
    capacity: tuple[str, ...],
    policy: tuple[str, ...],
    scope: str,
    expert_bytes: str | None,
    model: Path | None,
    calibration: Path | None,
) -> None:
    """Hit rate against capacity for every policy (LRU in one pass), plots and JSON."""
    from appliance.trace.curves import curves_report, default_capacities, plot_curves

    trace, setup = _setup(trace_path, expert_bytes, model, calibration)
    caps = _capacities(capacity) or default_capacities(setup, scope)
    report = curves_report(setup, trace.header, _policies(policy), caps, scope)
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_json(out / "curves.json", report, sort_keys=False)
    paths = plot_curves(report, out)
    click.echo(f"wrote {out / 'curves.json'} and {len(paths)} plots in {out}")


@trace_group.command("compare")
@click.argument("first", metavar="A", type=click.Path(path_type=Path))
@click.argument("second", metavar="B", type=click.Path(path_type=Path))
@json_option
def compare_cmd(first: Path, second: Path, as_json: bool) -> None:
    """Two traces' shapes and decode locality statistics side by side."""
    from appliance.trace.format import read_trace
    from appliance.trace.locality import locality

    sides: list[dict[str, Any]] = []
    for path in (first, second):
        trace = read_trace(path)
        h = trace.header
        sides.append(
            {
                "trace": path.name,
                "model_file": h.get("model_file"),
                "shape": f"{len(trace.moe_layers)} x {trace.n_experts}, k = {trace.k}",
                "locality": locality(trace),
            }
        )
    if as_json:
        _emit({"a": sides[0], "b": sides[1]})
        return
    a, b = sides
    rows = [("trace", a["trace"], b["trace"]), ("model", str(a["model_file"]), str(b["model_file"]))]
    rows.append(("layers x experts, k", a["shape"], b["shape"]))
    for (label, left), (_, right) in zip(
        locality_lines(a["locality"]), locality_lines(b["locality"]), strict=False
    ):
        rows.append((label, left, right))
    width = max(len(r[0]) for r in rows)
    middle = max(len(r[1]) for r in rows)
    for label, left, right in rows:
        click.echo(f"{label:<{width}}  {left:>{middle}}  {right}")


@trace_group.command("calibration")
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option(
    "--same-length",
    is_flag=True,
    help="Also show the range of the real traces cut to TRACE's number of decode tokens (their "
    "first N): the like-for-like view for the statistics that depend on length.",
)
@click.option(
    "--same-shape",
    is_flag=True,
    help="Also show the range of the real traces' slices of TRACE's number of MoE layers, cut "
    "to its decode tokens (random layer sets, each real trace's middle 90%), and let that range "
    "decide the exit status: the like-for-like gate for a model with fewer layers than the real "
    "ones, whose statistics move more than the whole traces' spread.",
)
@click.option(
    "--every-window",
    is_flag=True,
    help="Also show the range over every window of TRACE's number of decode tokens in each real "
    "trace (one every half window), not only its first; with --same-shape, that range's slices "
    "span every window too. A real model's own later windows leave several statistics outside "
    "the range of the first ones.",
)
@json_option
def calibration_cmd(
    trace_path: Path, same_length: bool, same_shape: bool, every_window: bool, as_json: bool
) -> None:
    """TRACE's decode locality beside the range of the three real traces, statistic by
    statistic (exit 1 when one lies outside the deciding range: the whole traces', or with
    --same-shape the slices')."""
    from appliance.trace.calibration import (
        SLICE_SHARE,
        SLICES_PER_TRACE,
        named,
        outside,
        real_range,
        statistics,
    )
    from appliance.trace.format import read_trace
    from appliance.trace.locality import locality

    whole = real_range()
    trace = read_trace(trace_path)
    loc = locality(trace)
    tokens, layers = int(loc["decode_tokens"]), len(trace.moe_layers)
    if tokens == 0:
        raise ConfigError(
            f"{trace_path}: no decode tokens; the statistics are of decode routing: "
            "trace a run that decodes (-n 1 or more)"
        )
    columns = [("real range", "whole", whole)]
    if same_length:
        columns.append(
            (f"first {tokens} decode tokens of each", "same_length", real_range(decode_tokens=tokens))
        )
    if every_window:
        windows = real_range(decode_tokens=tokens, every_window=True)
        columns.append((f"{tokens}-token decode windows of each", "every_window", windows))
    if same_shape:
        shape_range = real_range(decode_tokens=tokens, layers=layers, every_window=every_window)
        title = f"real {layers}-layer slices, {tokens} decode tokens"
        title += ", every window" if every_window else ""
        columns.append((title, "same_shape", shape_range))
    misses = {key: outside(loc, ranges) for _, key, ranges in columns}
    gate = "same_shape" if same_shape else "whole"
    rows: list[dict[str, Any]] = [
        {"statistic": name, "values": values, "real_min": whole[name][0], "real_max": whole[name][1]}
        for name, values in statistics(loc).items()
    ]
    if as_json:
        out: dict[str, Any] = {
            "trace": trace_path.name,
            "statistics": rows,
            "outside": misses["whole"],
            "gate": gate,
        }
        for _, key, ranges in columns[1:]:
            out[key] = {
                "decode_tokens": tokens,
                "ranges": {name: list(bounds) for name, bounds in ranges.items()},
                "outside": misses[key],
            }
        if same_shape:
            out["same_shape"] |= {
                "layers": layers,
                "every_window": every_window,
                "slices_per_trace": SLICES_PER_TRACE,
                "slice_share": SLICE_SHARE,
            }
        _emit(out)
    else:

        def shown_range(name: str, bounds: tuple[float, float]) -> str:
            if name == "hottest / uniform":
                return f"{bounds[0]:.1f} .. {bounds[1]:.1f}"
            return f"{_pct(bounds[0])} .. {_pct(bounds[1])}"

        width = max(len(r["statistic"]) for r in rows)
        marked = {key: named(lines) for key, lines in misses.items()}
        table = [[f"{'statistic':<{width}}  {'this trace':>15}", *(title for title, _, _ in columns)]]
        for r in rows:
            name, vals = r["statistic"], r["values"]
            shown = _pct(vals[0]) if len(vals) == 1 else f"{_pct(min(vals))}-{_pct(max(vals))}"
            if name == "hottest / uniform":
                shown = f"{vals[0]:.1f}"
            cells = [
                shown_range(name, ranges[name]) + ("  OUTSIDE" if name in marked[key] else "")
                for _, key, ranges in columns
            ]
            table.append([f"{name:<{width}}  {shown:>15}", *cells])
        widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
        for line in table:
            click.echo("  ".join(f"{cell:<{w}}" for cell, w in zip(line, widths, strict=True)).rstrip())
        for title, key, _ in columns[1:]:
            inside = len(rows) - len(misses[key])
            click.echo(f"{inside} of {len(rows)} inside the range of the {title}")
    titles = {key: title for title, key, _ in columns}
    deciding = "the real range" if gate == "whole" else f"the range of the {titles[gate]}"
    if misses[gate]:
        raise ApplianceError(
            f"{len(misses[gate])} of {len(rows)} statistics of {trace_path.name} outside {deciding}"
        )
    if not as_json:
        click.echo(f"all {len(rows)} statistics inside {deciding}")


@trace_group.command("lookahead")
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option(
    "--capacity",
    "capacity_share",
    type=finite(min=0, max=1, min_open=True),
    default=0.25,
    show_default=True,
    help="The lru cache's capacity as a share of the trace's (layer, expert) pairs.",
)
@click.option(
    "--predict",
    type=POSITIVE,
    default=None,
    help="Experts of the next layer each predictor names per event (default: the trace's k).",
)
@json_option
def lookahead_cmd(trace_path: Path, capacity_share: float, predict: int | None, as_json: bool) -> None:
    """How much of an lru expert cache's decode misses earlier routing predicts one layer
    ahead: per predictor (oracle, previous-token, popularity, co-occurrence) the share of
    misses it would have read ahead and the experts it would have read for nothing."""
    from appliance.trace.format import read_trace
    from appliance.trace.lookahead import score_predictors

    trace = read_trace(trace_path)
    pairs = len(trace.moe_layers) * trace.n_experts
    capacity = max(trace.k, int(pairs * capacity_share))
    scores = score_predictors(trace, capacity, predict or trace.k)
    if as_json:
        _emit({"trace": trace_path.name, "pairs": pairs, "scores": [s.to_json() for s in scores]})
        return
    first = scores[0]
    click.echo(
        f"{trace_path.name}: lru at {capacity} of {pairs} pairs, {first.decode_misses} decode misses "
        f"in {first.decode_tokens} tokens; {first.predicted} experts predicted per layer"
    )
    click.echo(f"{'predictor':<15} {'misses read ahead':>18} {'wasted / token':>15}")
    for s in scores:
        click.echo(f"{s.predictor:<15} {_pct(s.recall):>18} {_num(s.wasted_per_token):>15}")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


COMMANDS: list[click.Command] = [trace_group]
