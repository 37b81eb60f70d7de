"""Where a trial's model lives: the profile's `placement` turned into engine arguments.

`auto` passes nothing (llama.cpp's default placement, which the engine records); `cpu-moe`
offloads every layer and keeps every routed expert on the host (`-ngl 999 --cpu-moe`); `plan`
takes the planner's `-ngl` and `--n-cpu-moe`/`--cpu-moe` for the trial's RAM limit and the
profile's `limits.vram` (the default when `limits.vram` is set); a list is explicit engine
arguments. The placement options keep llama.cpp's meanings (patch 0001's `llama-moe-trace`).
Every check here runs before any container starts.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from appliance.core.errors import ConfigError
from appliance.core.units import format_size
from appliance.planner.accounting import Accounting
from appliance.planner.offload import Offload
from appliance.planner.plan import CUDA, PlanLimits, PlanVerdict, make_plan

AUTO, CPU_MOE, PLAN = "auto", "cpu-moe", "plan"
MODES = (AUTO, CPU_MOE, PLAN)
ALL_LAYERS = "999"  # -ngl beyond any model's layer count: llama.cpp offloads every layer
# the options of llama-moe-trace that decide placement, each with the flags that spell it
GPU_LAYERS = ("-ngl", "--n-gpu-layers")
N_CPU_MOE = ("-ncmoe", "--n-cpu-moe")
CPU_MOE_FLAGS = ("-cmoe", "--cpu-moe")
OVERRIDE = ("-ot", "--override-tensor")
PLACEMENT_FLAGS = (*GPU_LAYERS, *N_CPU_MOE, *CPU_MOE_FLAGS, *OVERRIDE)


@dataclass(frozen=True)
class Placement:
    """A profile's placement: a mode, or explicit engine arguments (mode None)."""

    mode: str | None
    args: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.mode if self.mode is not None else "explicit"


def _number(flag: str, value: str, pointer: str, low: int) -> int:
    if not re.fullmatch(r"-?[0-9]+", value) or int(value) < low:
        raise ConfigError(f"{pointer}: {flag} must be a whole number >= {low} (got {value!r})")
    return int(value)


def check_placement_args(args: tuple[str, ...], pointer: str) -> None:
    """Refuse a malformed placement option among engine arguments, naming the field."""
    for i, arg in enumerate(args):
        if arg not in (*GPU_LAYERS, *N_CPU_MOE, *OVERRIDE):
            continue
        if i + 1 >= len(args):
            raise ConfigError(f"{pointer}: {arg} needs a value")
        value = args[i + 1]
        if arg in GPU_LAYERS:
            _number(arg, value, pointer, -1)
        elif arg in N_CPU_MOE:
            _number(arg, value, pointer, 0)
        else:
            for item in value.split(","):
                pattern, eq, buffer_type = item.partition("=")
                if not eq or not pattern or not buffer_type:
                    raise ConfigError(
                        f"{pointer}: {arg} {item!r} is not PATTERN=BUFFER_TYPE (e.g. 'ffn_.*_exps=CPU')"
                    )
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ConfigError(
                        f"{pointer}: {arg} pattern {pattern!r} is not a valid regular expression: {exc}"
                    ) from None


def parse_placement(raw: object, vram: int | None, path: Path) -> Placement:
    """The profile's `placement` (validated by the schema as a mode or a list of strings)."""
    if raw is None:
        return Placement(PLAN if vram is not None else AUTO)
    if isinstance(raw, str):
        if raw not in MODES:
            raise ConfigError(
                f"{path}: /placement: {raw!r} is not one of {', '.join(MODES)} "
                "(or a list of engine arguments)"
            )
        if raw == PLAN and vram is None:
            raise ConfigError(
                f"{path}: /placement: plan needs limits.vram, the GPU budget the planner fills "
                "(or choose auto, cpu-moe or explicit arguments)"
            )
        return Placement(raw)
    args = tuple(str(a) for a in raw)  # type: ignore[attr-defined]
    if not args:
        raise ConfigError(
            f"{path}: /placement: an explicit placement needs engine arguments (or choose auto)"
        )
    check_placement_args(args, f"{path}: /placement")
    return Placement(None, args)


def planned_args(
    placement: Placement,
    accounting: Accounting | None,
    ram_bytes: int,
    vram_bytes: int | None,
    path: Path,
    device: str = CUDA,
    context: tuple[int, int] | None = None,
) -> tuple[str, ...]:
    """The engine arguments that realize `placement` for one trial's RAM limit. `plan` needs
    the model's accounting (and plans for `device`, a kind of planner.plan's DEVICE_OVERHEAD);
    a placement the planner cannot satisfy is refused in one line."""
    if placement.mode == AUTO:
        return ()
    if placement.mode == CPU_MOE:
        return ("-ngl", ALL_LAYERS, "--cpu-moe")
    if placement.mode is None:
        return placement.args
    assert accounting is not None and vram_bytes is not None, "plan needs the model and limits.vram"
    ctx, n_ubatch = context or (PlanLimits.ctx, PlanLimits.n_ubatch)
    limits = PlanLimits(ram_bytes=ram_bytes, vram_bytes=vram_bytes, device=device, ctx=ctx, n_ubatch=n_ubatch)
    plan = make_plan(accounting, limits)
    if plan.verdict is PlanVerdict.DOES_NOT_START:
        raise ConfigError(
            f"{path}: /placement: the planner cannot place {Path(accounting.source).name} under "
            f"{format_size(ram_bytes, trim=True)} RAM and limits.vram {format_size(vram_bytes, trim=True)}: "
            f"{plan.reason}"
        )
    return placement_options(tuple(plan.args))


def engine_context(prompt: str, n_predict: int) -> tuple[int, int]:
    """(n_ctx, n_ubatch) llama-moe-trace allocates for this prompt and decode length (n_prompt +
    n_predict + 1, and min(512, n_prompt)), with the prompt's tokens bounded by its UTF-8 bytes
    plus BOS and EOS: every token is at least one byte. The planner sizes KV cache and compute
    buffers from them."""
    prompt_tokens = len(prompt.encode()) + 2
    return prompt_tokens + n_predict + 1, min(PlanLimits.n_ubatch, prompt_tokens)


def placement_options(args: tuple[str, ...]) -> tuple[str, ...]:
    """The placement options among engine arguments (each with its value), in their order."""
    kept: list[str] = []
    for i, arg in enumerate(args):
        if arg in CPU_MOE_FLAGS:
            kept.append(arg)
        elif arg in (*GPU_LAYERS, *N_CPU_MOE, *OVERRIDE) and i + 1 < len(args):
            kept += [arg, args[i + 1]]
    return tuple(kept)


def offload_of(args: tuple[str, ...], layers: int) -> Offload | None:
    """The offload placement options give a model of `layers` layers (MTP/NextN included); None
    where they are not modelled here: tensor overrides, or -ngl -1 (llama.cpp's own choice)."""
    ngl, cpu_moe = 0, 0
    for i, arg in enumerate(args):
        if arg in OVERRIDE:
            return None
        if arg in CPU_MOE_FLAGS:
            cpu_moe = layers
        elif i + 1 < len(args) and arg in GPU_LAYERS:
            ngl = int(args[i + 1])
        elif i + 1 < len(args) and arg in N_CPU_MOE:
            cpu_moe = max(cpu_moe, int(args[i + 1]))
    if ngl < 0:
        return None
    return Offload.of_ngl(layers, ngl, cpu_moe)


def placement_text(placement: Placement, args: tuple[str, ...]) -> str:
    """One trial's placement as printed before a run: the mode and the arguments it gives."""
    if not args:
        return f"{placement.label}: no arguments (llama.cpp's default placement)"
    return f"{placement.label}: {shlex.join(args)}"
