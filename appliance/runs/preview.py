"""What `appliance run` and `appliance sweep` print before the trials: the header, the stand-in
warning and the trial plan (dry run). The results after a run: `appliance.analysis.run_summary`."""

from typing import Any

from rich.console import Console
from rich.table import Table

from appliance.core.units import format_size
from appliance.engine.lock import Lock
from appliance.host.cgroups import BlockDevice
from appliance.host.read_ahead import ReadAheadMode
from appliance.images import labels as L
from appliance.runs.device_server import joined, server_name, server_spec
from appliance.runs.model_files import SKELETON, SKIPPED, UNPINNED
from appliance.runs.placement import placement_text
from appliance.runs.plan import Engine, container_spec, docker_cli_equivalent
from appliance.runs.prepare import PreparedRun
from appliance.runs.profile import STAND_IN_GPU, MemoryLimits
from appliance.runs.run_dir import RunDir


def planned_specs(prepared: PreparedRun, engine: Engine, run_id: str) -> list[dict[str, Any]]:
    """The docker-py `containers.run` arguments of every trial, in run order."""
    specs = []
    for trial in prepared.trials:
        results = RunDir(prepared.run_dir).scratch_for(trial.name)
        name = f"appliance-{run_id}-{trial.index:03d}"
        spec = container_spec(
            prepared.profile,
            engine,
            trial,
            prepared.settings,
            results,
            name,
            {L.RUN: run_id},
            RunDir(prepared.run_dir).trial(trial.future).trace if trial.future else None,
        )
        specs.append(joined(spec, server_name(name)) if prepared.profile.gpu == STAND_IN_GPU else spec)
    return specs


def print_device_server(console: Console, prepared: PreparedRun, run_id: str) -> None:
    """A stand-in profile's device server, as each trial starts it before its engine."""
    vram = prepared.profile.limits.vram
    if prepared.profile.gpu != STAND_IN_GPU or vram is None:
        return
    name = server_name(f"appliance-{run_id}-NNN")
    spec = server_spec(prepared.image, name, {L.RUN: run_id}, vram, prepared.settings.user)
    console.print(
        f"[bold]docker run[/bold] of each trial's stand-in device (started first, removed with the "
        f"trial; its memory limit, {format_size(vram, trim=True)}, is the device's size):"
    )
    console.print(docker_cli_equivalent(spec), highlight=False, soft_wrap=True)


def digest_line(prepared: PreparedRun) -> str:
    model = prepared.model
    if model.digest_status == SKELETON:
        pinned = prepared.profile.model.bytes
        stands_for = f"the pinned {pinned:,} bytes" if pinned is not None else "the model"
        return (
            f"SKELETON (--skeleton): a header-only file stands for {stands_for}; size and sha256 NOT "
            "checked, placement planned from its header: nothing here can run"
        )
    if model.digest_status == SKIPPED:
        return "sha256 NOT CHECKED (--skip-digest-check): this run is not verified"
    if model.digest_status == UNPINNED:
        return f"sha256 {model.sha256} (the profile pins no digest: pin this one in a copy of the profile)"
    cached = ", from the digest cache" if model.digest_from_cache else ""
    return f"sha256 {model.sha256} verified{cached}"


def print_stand_in(console: Console, prepared: PreparedRun, lock: Lock) -> str | None:
    """Say loudly when the run's image is built from a stand-in; returns its name, or None."""
    stand_in = prepared.stand_in
    if stand_in is not None:
        console.print(
            f"[bold yellow]engine built from the {stand_in} STAND-IN source, not the "
            f"canonical pin {lock.upstream.release}[/bold yellow]"
        )
    return stand_in


def read_ahead_text(limits: MemoryLimits, device: BlockDevice) -> str:
    """The read-ahead the trials will run at, and whether the run sets it."""
    now = device.read_ahead_kb
    if limits.read_ahead_mode == ReadAheadMode.SET:
        return (
            f", read-ahead {limits.read_ahead_kb} KiB during each trial (limits.read_ahead: set, "
            f"{now} KiB now and written back after each)"
        )
    return "" if now is None else f", read-ahead {now} KiB (observed, not set)"


def print_header(console: Console, prepared: PreparedRun) -> None:
    p, limits = prepared.profile, prepared.profile.limits
    swept = sorted({t.memory for t in prepared.trials if t.memory is not None})
    if swept:  # the profile's description names its own limit, which a sweep replaces
        console.print(f"[bold]profile[/bold] {p.name}, swept over {len(swept)} memory limits")
    else:
        console.print(f"[bold]profile[/bold] {p.name}: {p.description}")
    console.print(f"model       {prepared.model.path} ({prepared.model.bytes:,} bytes)")
    style = "bold red" if prepared.model.digest_status != "verified" else "green"
    console.print(f"            [{style}]{digest_line(prepared)}[/{style}]", highlight=False)
    target = prepared.choice.target or "auto (unresolved: no GPU visible)"
    console.print(
        f"target      {target}; image {prepared.image}"
        f"{'' if prepared.image_checked else ' (not checked in a dry run)'}"
    )
    swap = "no swap" if limits.swap == 0 else f"swap {format_size(limits.swap, trim=True)}"
    if swept:
        sizes = ", ".join(format_size(m, trim=True) for m in swept)
        console.print(f"memory      limits {sizes}, one per trial ({swap})")
    else:
        console.print(
            f"memory      limit {format_size(limits.memory, trim=True)} ({limits.memory} bytes), "
            f"memory+swap {format_size(limits.memswap, trim=True)} ({swap})"
        )
    console.print(f"model mount {prepared.settings.models_dir} -> /models (read-only)")
    gpu = prepared.settings.gpu_device_ids
    console.print(
        "GPU request " + (f"nvidia device {','.join(gpu)} (capabilities gpu)" if gpu is not None else "none")
    )
    device = prepared.settings.block_device
    console.print(
        "block reads "
        + (
            f"counted on {device.node} ({device.key}){read_ahead_text(limits, device)}"
            if device
            else "not countable (the model is not on a block device)"
        )
    )
    vram = prepared.profile.limits.vram
    card = prepared.gpu
    console.print(
        "GPU memory  budget "
        + (format_size(vram, trim=True) if vram is not None else "none (limits.vram unset)")
        + (f" on GPU {card.index} {card.name}, {format_size(card.memory_bytes, trim=True)}" if card else "")
        + f"; placement {prepared.profile.placement.label}"
    )
    if prepared.choice.note:
        console.print(f"[bold red]note[/bold red]        {prepared.choice.note}")
    for warning in prepared.warnings:
        console.print(f"[bold yellow]warning[/bold yellow]     {warning}")


def print_plan(console: Console, prepared: PreparedRun, specs: list[dict[str, Any]]) -> None:
    table = Table(title=f"trial plan ({prepared.profile.schedule.order}, {len(prepared.trials)} trials)")
    for column in ("trial", "variant", "repeat", "env", "placement", "cold cache"):
        table.add_column(column)
    for trial in prepared.trials:
        env = " ".join(f"{k}={v}" for k, v in sorted(trial.variant.env.items())) or "-"
        table.add_row(
            trial.name,
            trial.variant.name,
            str(trial.repeat),
            env,
            placement_text(prepared.profile.placement, trial.placement)
            + (" (SKELETON)" if prepared.model.digest_status == SKELETON else ""),
            "evict + check" if prepared.profile.schedule.cold_cache else "no",
        )
    console.print(table)
    seen = set()
    for trial, spec in zip(prepared.trials, specs, strict=True):
        if trial.variant.name in seen:
            continue
        seen.add(trial.variant.name)
        skeleton = (
            " (model is a SKELETON: shown, cannot run)" if prepared.model.digest_status == SKELETON else ""
        )
        console.print(f"[bold]docker run[/bold] for variant {trial.variant.name}{skeleton}:")
        console.print(docker_cli_equivalent(spec), highlight=False, soft_wrap=True)
    if specs:
        print_device_server(console, prepared, specs[0]["labels"][L.RUN])
