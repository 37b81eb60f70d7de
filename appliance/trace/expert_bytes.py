"""Bytes of one routed expert per MoE layer: the one definition, shared by the trace's replay
(capacities, `trace replay --expert-bytes auto`, the sweep's plan) and the planner's byte
accounting (`appliance.planner.accounting`).

A routed expert tensor is `blk.N.ffn_*exps*` (`ffn_gate_exps.weight`, `ffn_up_exps.weight`,
`ffn_down_exps.weight`, fused or biased forms alike; a shared expert's `shexp` is not one). Its
last dimension counts experts, so one expert's slice of it is its bytes divided by that count;
an expert of block N is the sum of its slices. Sizes come from the GGUF header alone, read by
the one bounded reader (`appliance.models.gguf_header`): no weight is read, so a header-only
skeleton gives the same numbers as the full file.

Against a trace, the GGUF must be the model the trace was recorded with: architecture, expert
counts, MoE layers, file size and (when the trace carries it) sha256 must agree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from appliance.core.digests import sha256_file
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.models.gguf_header import GGUFHeader, read_header_file, tensor_nbytes

LAYER_TENSOR = re.compile(r"^blk\.(\d{1,9})\.(.*)$")  # a tensor of the layer stack: (layer, rest)
ROUTED_EXPERT = re.compile(r"^ffn_[a-z_]*?_?exps(\b|_|\.)")  # `rest` of a routed expert tensor


def routed_expert_layer(name: str) -> int | None:
    """The layer of a routed expert tensor; None for any other tensor."""
    match = LAYER_TENSOR.match(name)
    if not match or "shexp" in match.group(2) or not ROUTED_EXPERT.match(match.group(2)):
        return None
    return int(match.group(1))


def expert_slice_bytes(name: str, shape: tuple[int, ...], nbytes: int, experts: int, source: str) -> int:
    """Bytes of one expert's slice of a routed expert tensor: its bytes over its expert
    dimension (the last of a 3-d tensor, else the model's expert count)."""
    n_experts = shape[-1] if len(shape) == 3 else max(experts, 1)
    if n_experts == 0:
        raise ApplianceError(
            f"{source}: corrupt GGUF header: routed expert tensor {name!r} has shape {list(shape)}, 0 experts"
        )
    return nbytes // n_experts


def _header_experts(header: GGUFHeader) -> tuple[Any, Any, Any, dict[int, int]]:
    """(architecture, expert count, experts used, bytes of one expert per MoE layer) as the
    GGUF header states them (None where a key is missing)."""
    from gguf import Keys  # gguf loads only when a model is read

    arch = header.get(Keys.General.ARCHITECTURE)
    n_experts = header.get(Keys.LLM.EXPERT_COUNT.format(arch=arch))
    n_used = header.get(Keys.LLM.EXPERT_USED_COUNT.format(arch=arch))
    experts = n_experts if isinstance(n_experts, int) and not isinstance(n_experts, bool) else 0
    per_layer: dict[int, int] = {}
    for info in header.tensors:
        layer = routed_expert_layer(info.name)
        if layer is not None:
            _, nbytes = tensor_nbytes(info.name, info.shape, info.type_id, header.source)
            one = expert_slice_bytes(info.name, info.shape, nbytes, experts, header.source)
            per_layer[layer] = per_layer.get(layer, 0) + one
    return arch, n_experts, n_used, dict(sorted(per_layer.items()))


def _read_experts(path: Path) -> tuple[Any, Any, Any, dict[int, int]]:
    try:
        header = read_header_file(path)
    except ApplianceError as exc:
        raise ConfigError(f"cannot read GGUF: {exc}") from None
    return _header_experts(header)


def expert_bytes_from_gguf(path: Path, header: dict[str, Any]) -> dict[int, int]:
    """Per MoE layer, the bytes one expert occupies; error if the GGUF is not the trace's model."""
    arch, n_experts, n_used, per_layer = _read_experts(path)
    name = path.name

    def disagree(what: str, gguf_value: Any, trace_value: Any) -> ConfigError:
        return ConfigError(
            f"{name} does not match the trace: {what} is {gguf_value!r} in the "
            f"GGUF but {trace_value!r} in the trace header; pass the model the "
            "trace was recorded with"
        )

    if header.get("arch") not in (None, "synthetic") and arch != header["arch"]:
        raise disagree("architecture", arch, header["arch"])
    if n_experts != header["n_experts"]:
        raise disagree("expert count", n_experts, header["n_experts"])
    if n_used is not None and n_used != header["n_expert_used"]:
        raise disagree("experts per token", n_used, header["n_expert_used"])
    if sorted(per_layer) != list(header["moe_layers"]):
        raise disagree("MoE layers", sorted(per_layer), header["moe_layers"])
    size = path.stat().st_size
    if header.get("model_bytes") and size != header["model_bytes"]:
        raise disagree("file size", size, header["model_bytes"])
    if header.get("model_sha256") and sha256_file(path) != header["model_sha256"]:
        raise IntegrityError(
            f"{name}: sha256 differs from the trace header's model_sha256; "
            "pass the exact model the trace was recorded with"
        )
    return per_layer


def gguf_expert_layout(path: Path) -> tuple[int, int, dict[int, int]]:
    """(experts per layer, experts used per token, bytes of one expert per MoE layer) of a GGUF,
    for planning before any trace exists; ConfigError when it is not a MoE model."""
    _, n_experts, n_used, per_layer = _read_experts(path)
    if not n_experts or not n_used or not per_layer:
        raise ConfigError(f"{path.name} is not a mixture-of-experts GGUF (no expert tensors)")
    return int(n_experts), int(n_used), per_layer


def gguf_trace_fields(path: Path) -> dict[str, Any]:
    """The header fields a trace of this GGUF carries (arch, model identity, layers, experts),
    for a trace made elsewhere and imported; ConfigError when it is not a MoE model."""
    try:
        header = read_header_file(path)
    except ApplianceError as exc:
        raise ConfigError(f"cannot read GGUF: {exc}") from None
    from gguf import Keys

    arch, n_experts, n_used, per_layer = _header_experts(header)
    blocks = header.get(Keys.LLM.BLOCK_COUNT.format(arch=arch))
    if not n_experts or not n_used or not per_layer:
        raise ConfigError(f"{path.name} is not a mixture-of-experts GGUF (no expert tensors)")
    if not isinstance(blocks, int) or isinstance(blocks, bool) or blocks <= max(per_layer):
        raise ConfigError(
            f"{path.name}: {Keys.LLM.BLOCK_COUNT.format(arch=arch)} is {blocks!r}, not a number "
            f"of blocks above its last MoE layer {max(per_layer)}; the GGUF header is corrupt"
        )
    return {
        "arch": str(arch),
        "model_file": path.name,
        "model_bytes": path.stat().st_size,
        "model_sha256": sha256_file(path),
        "n_layers": blocks,
        "moe_layers": sorted(per_layer),
        "n_experts": int(n_experts),
        "n_expert_used": int(n_used),
    }


def expert_bytes_from_header(header: dict[str, Any]) -> dict[int, int] | None:
    """The bytes of one routed expert per MoE layer that the trace itself carries (its header's
    `expert_bytes`, written by imports whose source records them), or None when it has none.
    The trace reader has checked the keys are exactly the MoE layers."""
    sizes = header.get("expert_bytes")
    if sizes is None:
        return None
    return {int(layer): int(size) for layer, size in sorted(sizes.items(), key=lambda kv: int(kv[0]))}
