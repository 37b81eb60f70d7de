"""Where a GGUF's bytes are: per-tensor sizes by type, grouped the way placement needs them,
expert bytes per layer (the one tensor rule and formula of `appliance.trace.expert_bytes`), and
the architecture facts a memory plan depends on.

Everything comes from the header (`appliance.models.gguf_header`); no weight is read. Group totals
plus alignment padding add up exactly to the tensor data section of the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core.errors import ApplianceError
from appliance.core.limits import MAX_MODEL_EXPERTS, MAX_MODEL_LAYERS
from appliance.models.gguf_header import (
    ArrayInfo,
    ByteSource,
    GGUFHeader,
    read_header,
    read_header_file,
    tensor_nbytes,
)
from appliance.trace.expert_bytes import LAYER_TENSOR, expert_slice_bytes, routed_expert_layer

GROUPS = (
    "routed_experts",
    "shared_experts",
    "router",
    "attention_ssm",
    "dense_ffn",
    "embeddings",
    "output",
    "other",
)
GROUP_TITLES = {
    "routed_experts": "routed experts",
    "shared_experts": "shared experts",
    "router": "routers",
    "attention_ssm": "attention / SSM / norms",
    "dense_ffn": "dense FFN",
    "embeddings": "token embeddings",
    "output": "output head",
    "other": "other",
}
HYBRID_ARCHES = {"qwen3next", "qwen35", "qwen35moe"}  # recurrent layers + every n-th attention
MAX_HPARAM = (1 << 32) - 1  # hyperparameters are u32 in llama.cpp


@dataclass(frozen=True)
class TensorBytes:
    name: str
    type_name: str
    shape: tuple[int, ...]
    nbytes: int
    offset: int  # absolute file offset
    group: str
    layer: int  # -1 outside the layer stack


@dataclass(frozen=True)
class ArchFacts:
    arch: str
    layers: int  # main decoder layers (without MTP/NextN blocks)
    nextn_layers: int
    experts: int
    experts_used: int
    expert_ff: int
    context_length: int
    embedding: int
    vocab: int
    head_count: list[int]
    head_count_kv: list[int]
    key_length: int
    value_length: int
    attention_layers: list[int]
    recurrent_layers: list[int]
    recurrent_state_bytes: int  # per sequence, all recurrent layers (f32 conv + SSM state)

    def kv_bytes_per_token(self, bytes_per_element: int = 2) -> int:
        """K and V cache per token of context over all attention layers (f16 cache)."""
        return (
            sum(self.head_count_kv[i] * (self.key_length + self.value_length) for i in self.attention_layers)
            * bytes_per_element
        )


@dataclass
class Accounting:
    source: str
    file_size: int
    partial: bool  # the source held only the header
    header_bytes: int  # data section offset
    tensor_data_bytes: int
    padding_bytes: int
    groups: dict[str, int]
    routed_by_layer: dict[int, int]  # routed expert bytes per layer
    expert_bytes_by_layer: dict[int, int]  # bytes of ONE routed expert in that layer
    types: dict[str, int]  # bytes per tensor type
    facts: ArchFacts
    tensors: list[TensorBytes] = field(repr=False)

    @property
    def routed_bytes_per_token(self) -> int:
        """Routed expert bytes one token touches across all layers (used experts each)."""
        return sum(b * self.facts.experts_used for b in self.expert_bytes_by_layer.values())

    def summary(self) -> dict[str, Any]:
        f = self.facts
        return {
            "source": self.source,
            "file_size": self.file_size,
            "partial": self.partial,
            "header_bytes": self.header_bytes,
            "tensor_data_bytes": self.tensor_data_bytes,
            "padding_bytes": self.padding_bytes,
            "groups": self.groups,
            "types": self.types,
            "routed_bytes_by_layer": {str(k): v for k, v in self.routed_by_layer.items()},
            "expert_bytes_by_layer": {str(k): v for k, v in self.expert_bytes_by_layer.items()},
            "routed_bytes_per_token": self.routed_bytes_per_token,
            "arch": {
                "name": f.arch,
                "layers": f.layers,
                "nextn_layers": f.nextn_layers,
                "experts": f.experts,
                "experts_used": f.experts_used,
                "expert_ff": f.expert_ff,
                "context_length": f.context_length,
                "embedding": f.embedding,
                "vocab": f.vocab,
                "attention_layers": len(f.attention_layers),
                "recurrent_layers": len(f.recurrent_layers),
                "kv_bytes_per_token": f.kv_bytes_per_token(),
                "recurrent_state_bytes": f.recurrent_state_bytes,
            },
        }


def classify(name: str) -> tuple[str, int]:
    """(group, layer) of a tensor name in llama.cpp's GGUF naming."""
    match = LAYER_TENSOR.match(name)
    if not match:
        if name.startswith("token_embd") or name.startswith("per_layer_token_embd"):
            return "embeddings", -1
        if name.startswith("output"):
            return "output", -1
        return "other", -1
    layer, rest = int(match.group(1)), match.group(2)
    if "shexp" in rest:
        return "shared_experts", layer
    if routed_expert_layer(name) is not None:
        return "routed_experts", layer
    if rest.startswith("ffn_gate_inp") or rest.startswith("exp_probs"):
        return "router", layer
    if rest.startswith("ffn_norm"):
        return "attention_ssm", layer
    if rest.startswith("ffn_"):
        return "dense_ffn", layer
    if rest.startswith("nextn."):
        return "other", layer
    return "attention_ssm", layer


def whole_number(value: Any, name: str, source: str, low: int = 0, high: int = MAX_HPARAM) -> int:
    """A metadata value as an int in [low, high], or a one-line error naming the key."""
    number = value
    if isinstance(value, float) and value.is_integer():
        number = int(value)
    if not isinstance(number, int) or isinstance(number, bool) or not low <= number <= high:
        shown = f"an array of {value.count}" if isinstance(value, ArrayInfo) else repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ApplianceError(
            f"{source}: corrupt GGUF header: {name} is {shown}, not a whole number from {low} to {high}"
        )
    return number


def per_layer(value: Any, layers: int, name: str, source: str, default: int = 0) -> list[int]:
    if isinstance(value, list):
        items = [whole_number(v, name, source) for v in value[:layers]]
        return items + [default] * max(0, layers - len(value))
    return [whole_number(value if value is not None else default, name, source)] * layers


def arch_facts(header: GGUFHeader) -> ArchFacts:
    a = header.arch

    def key(name: str, default: Any = None) -> Any:
        return header.get(f"{a}.{name}", default)

    def number(name: str, default: int = 0, low: int = 0, high: int = MAX_HPARAM) -> int:
        return whole_number(key(name, default), f"{a}.{name}", header.source, low, high)

    def layered(name: str, default: Any = 0) -> list[int]:
        return per_layer(key(name, default), layers, f"{a}.{name}", header.source)

    total_layers = number("block_count", high=MAX_MODEL_LAYERS)
    nextn = number("nextn_predict_layers", high=total_layers)
    layers = total_layers - nextn
    tokens = header.get("tokenizer.ggml.tokens")
    vocab = tokens.count if isinstance(tokens, ArrayInfo) else len(tokens) if isinstance(tokens, list) else 0
    vocab = vocab or number("vocab_size")
    embedding = number("embedding_length")
    heads = layered("attention.head_count")
    heads_kv = layered("attention.head_count_kv", None)
    if key("attention.head_count_kv") is None:
        heads_kv = list(heads)
    most_heads: int = max(heads, default=0)
    head_dim = embedding // most_heads if most_heads else 0
    key_length = number("attention.key_length", head_dim)
    value_length = number("attention.value_length", head_dim)
    recurrent: list[int] = []
    if a in HYBRID_ARCHES:
        interval = number("full_attention_interval", 4, low=1)
        recurrent = [i for i in range(layers) if (i + 1) % interval != 0]
    recurrent_set = set(recurrent)
    attention = [i for i in range(layers) if i not in recurrent_set and heads_kv[i] > 0]
    d_conv, d_inner = number("ssm.conv_kernel"), number("ssm.inner_size")
    d_state, n_group = number("ssm.state_size"), number("ssm.group_count")
    conv = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    state_bytes = len(recurrent) * (conv + d_state * d_inner) * 4
    experts = number("expert_count", high=MAX_MODEL_EXPERTS)
    ff_name = (
        "expert_feed_forward_length"
        if key("expert_feed_forward_length") is not None
        else "feed_forward_length"
    )
    return ArchFacts(
        arch=a,
        layers=layers,
        nextn_layers=nextn,
        experts=experts,
        experts_used=number("expert_used_count", high=experts),
        expert_ff=max(per_layer(key(ff_name, 0), max(layers, 1), f"{a}.{ff_name}", header.source)),
        context_length=number("context_length"),
        embedding=embedding,
        vocab=vocab,
        head_count=heads,
        head_count_kv=heads_kv,
        key_length=key_length,
        value_length=value_length,
        attention_layers=attention,
        recurrent_layers=recurrent,
        recurrent_state_bytes=state_bytes,
    )


def account(header: GGUFHeader) -> Accounting:
    facts = arch_facts(header)
    tensors: list[TensorBytes] = []
    for info in header.tensors:
        type_name, nbytes = tensor_nbytes(info.name, info.shape, info.type_id, header.source)
        group, layer = classify(info.name)
        tensors.append(
            TensorBytes(
                info.name, type_name, info.shape, nbytes, header.data_offset + info.offset, group, layer
            )
        )
    data_end = max((t.offset + t.nbytes for t in tensors), default=header.data_offset)
    partial = header.file_size is None or header.file_size < data_end
    file_size = data_end if partial or header.file_size is None else header.file_size
    groups = dict.fromkeys(GROUPS, 0)
    types: dict[str, int] = {}
    routed_by_layer: dict[int, int] = {}
    expert_bytes: dict[int, int] = {}
    for t in tensors:
        groups[t.group] += t.nbytes
        types[t.type_name] = types.get(t.type_name, 0) + t.nbytes
        if t.group == "routed_experts":
            routed_by_layer[t.layer] = routed_by_layer.get(t.layer, 0) + t.nbytes
            one = expert_slice_bytes(t.name, t.shape, t.nbytes, facts.experts, header.source)
            expert_bytes[t.layer] = expert_bytes.get(t.layer, 0) + one
    data_bytes = sum(t.nbytes for t in tensors)
    return Accounting(
        source=header.source,
        file_size=file_size,
        partial=partial,
        header_bytes=header.data_offset,
        tensor_data_bytes=data_bytes,
        padding_bytes=file_size - header.data_offset - data_bytes,
        groups=groups,
        routed_by_layer=dict(sorted(routed_by_layer.items())),
        expert_bytes_by_layer=dict(sorted(expert_bytes.items())),
        types=types,
        facts=facts,
        tensors=tensors,
    )


def account_source(source: ByteSource) -> Accounting:
    return account(read_header(source))


def account_file(path: Path) -> Accounting:
    return account(read_header_file(path))
