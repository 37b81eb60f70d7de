"""Bytes of one routed expert per MoE layer, read from a GGUF's expert tensors.

An expert of block N is its slice of `blk.N.ffn_{gate,up,down}_exps.weight` (the last tensor
dimension counts experts), so its size is the three tensors' bytes divided by the expert
count. The GGUF must be the model the trace was recorded with: architecture, expert counts,
MoE layers, file size and (when the trace carries it) sha256 must agree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from appliance.core.digests import sha256_file
from appliance.core.errors import ConfigError, IntegrityError

EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight$")


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _expert_tensors(path: Path) -> tuple[Any, Any, Any, dict[int, int]]:
    """(architecture, expert count, experts used, bytes of all expert tensors per MoE layer) as
    the GGUF states them (None where a key is missing)."""
    from gguf import GGUFReader, Keys

    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read GGUF ({exc})") from None
    arch = _field(reader, Keys.General.ARCHITECTURE)
    n_experts = _field(reader, Keys.LLM.EXPERT_COUNT.format(arch=arch))
    n_used = _field(reader, Keys.LLM.EXPERT_USED_COUNT.format(arch=arch))
    per_layer: dict[int, int] = {}
    for tensor in reader.tensors:
        match = EXPERT_TENSOR.match(tensor.name)
        if match:
            layer = int(match.group(1))
            per_layer[layer] = per_layer.get(layer, 0) + int(tensor.n_bytes)
    return arch, n_experts, n_used, per_layer


def expert_bytes_from_gguf(path: Path, header: dict[str, Any]) -> dict[int, int]:
    """Per MoE layer, the bytes one expert occupies; error if the GGUF is not the trace's model."""
    arch, n_experts, n_used, per_layer = _expert_tensors(path)
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
    return {layer: total // int(n_experts) for layer, total in per_layer.items()}


def gguf_expert_layout(path: Path) -> tuple[int, int, dict[int, int]]:
    """(experts per layer, experts used per token, bytes of one expert per MoE layer) of a GGUF,
    for planning before any trace exists; ConfigError when it is not a MoE model."""
    _, n_experts, n_used, totals = _expert_tensors(path)
    if not n_experts or not n_used or not totals:
        raise ConfigError(f"{path.name} is not a mixture-of-experts GGUF (no expert tensors)")
    return int(n_experts), int(n_used), {layer: total // int(n_experts) for layer, total in totals.items()}
