"""Header-only GGUFs of published models: metadata and tensor infos, no weights.

Input is a JSON document (see evidence/plans/*.input.json) with the model's published
configuration, the tensor type recipe and where every number came from. The tensor list
follows llama.cpp b10229's qwen35moe loader (src/models/qwen35moe.cpp) with separate gate/up
expert tensors (convert_hf_to_gguf's default); the NextN/MTP block is left out. The result
plans exactly like the real file would if the recipe matched it: `appliance plan` reads
only headers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter, Keys
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from appliance.core.errors import ConfigError
from appliance.core.strict_load import load_json

SUPPORTED_ARCHES = ("qwen35moe",)
REQUIRED = (
    "hidden_size",
    "num_hidden_layers",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "full_attention_interval",
    "vocab_size",
    "max_position_embeddings",
)
ROLES = ("routed_gate_up", "routed_down", "matrices", "embeddings", "output", "vectors")


def _type(recipe: dict[str, str], role: str, where: str) -> GGMLQuantizationType:
    name = recipe.get(role)
    try:
        return GGMLQuantizationType[str(name).upper()]
    except KeyError:
        raise ConfigError(
            f"{where}: types.{role} = {name!r} is not a ggml type name (e.g. IQ4_NL, Q8_0, F32)"
        ) from None


def tensor_specs(
    cfg: dict[str, int], recipe: dict[str, str], where: str
) -> list[tuple[str, tuple[int, ...], GGMLQuantizationType]]:
    """(name, ggml shape, type) of every tensor llama.cpp loads for a qwen35moe model."""
    t = {role: _type(recipe, role, where) for role in ROLES}
    e, v, x = cfg["hidden_size"], cfg["vocab_size"], cfg["num_experts"]
    ff, sff = cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
    heads, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    k_heads, v_heads = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    k_dim, v_dim = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    conv_dim = 2 * k_heads * k_dim + v_heads * v_dim
    out: list[tuple[str, tuple[int, ...], GGMLQuantizationType]] = [
        ("token_embd.weight", (e, v), t["embeddings"]),
        ("output_norm.weight", (e,), t["vectors"]),
        ("output.weight", (e, v), t["output"]),
    ]
    for i in range(cfg["num_hidden_layers"]):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (e,), t["vectors"]),
            (b + "post_attention_norm.weight", (e,), t["vectors"]),
        ]
        if (i + 1) % cfg["full_attention_interval"] != 0:
            out += [
                (b + "attn_qkv.weight", (e, conv_dim), t["matrices"]),
                (b + "attn_gate.weight", (e, v_heads * v_dim), t["matrices"]),
                (b + "ssm_conv1d.weight", (cfg["linear_conv_kernel_dim"], conv_dim), t["vectors"]),
                (b + "ssm_dt.bias", (v_heads,), t["vectors"]),
                (b + "ssm_a", (v_heads,), t["vectors"]),
                (b + "ssm_beta.weight", (e, v_heads), t["matrices"]),
                (b + "ssm_alpha.weight", (e, v_heads), t["matrices"]),
                (b + "ssm_norm.weight", (v_dim,), t["vectors"]),
                (b + "ssm_out.weight", (v_heads * v_dim, e), t["matrices"]),
            ]
        else:
            out += [
                (b + "attn_q.weight", (e, heads * hd * 2), t["matrices"]),
                (b + "attn_k.weight", (e, kv * hd), t["matrices"]),
                (b + "attn_v.weight", (e, kv * hd), t["matrices"]),
                (b + "attn_output.weight", (heads * hd, e), t["matrices"]),
                (b + "attn_k_norm.weight", (hd,), t["vectors"]),
                (b + "attn_q_norm.weight", (hd,), t["vectors"]),
            ]
        out += [
            (b + "ffn_gate_inp.weight", (e, x), t["vectors"]),
            (b + "ffn_gate_exps.weight", (e, ff, x), t["routed_gate_up"]),
            (b + "ffn_up_exps.weight", (e, ff, x), t["routed_gate_up"]),
            (b + "ffn_down_exps.weight", (ff, e, x), t["routed_down"]),
            (b + "ffn_gate_inp_shexp.weight", (e,), t["vectors"]),
            (b + "ffn_gate_shexp.weight", (e, sff), t["matrices"]),
            (b + "ffn_up_shexp.weight", (e, sff), t["matrices"]),
            (b + "ffn_down_shexp.weight", (sff, e), t["matrices"]),
        ]
    for name, shape, qtype in out:
        block = GGML_QUANT_SIZES[qtype][0]
        if shape[0] % block:
            raise ConfigError(
                f"{where}: {name} has rows of {shape[0]} elements, not a multiple "
                f"of {qtype.name}'s {block}-element block: pick another type"
            )
    return out


def nbytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape, dtype=np.int64)) // block * size


def load_input(path: Path) -> dict[str, Any]:
    doc = load_json(path)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: the skeleton input is a JSON object")
    if doc.get("arch") not in SUPPORTED_ARCHES:
        raise ConfigError(f"{path}: arch {doc.get('arch')!r} not supported ({', '.join(SUPPORTED_ARCHES)})")
    missing = [k for k in REQUIRED if k not in doc.get("config", {})]
    if missing:
        raise ConfigError(f"{path}: config lacks {', '.join(missing)}")
    return doc


def write_skeleton(input_path: Path, out: Path) -> int:
    """Write the header-only GGUF; returns the tensor data size the real file would have."""
    doc = load_input(input_path)
    cfg = {k: int(doc["config"][k]) for k in REQUIRED}
    specs = tensor_specs(cfg, doc.get("types", {}), str(input_path))
    a = doc["arch"]
    writer = GGUFWriter(None, a)
    writer.add_name(str(doc.get("model", "reference model")))
    writer.add_uint32(Keys.LLM.CONTEXT_LENGTH.format(arch=a), cfg["max_position_embeddings"])
    writer.add_uint32(Keys.LLM.EMBEDDING_LENGTH.format(arch=a), cfg["hidden_size"])
    writer.add_uint32(Keys.LLM.BLOCK_COUNT.format(arch=a), cfg["num_hidden_layers"])
    writer.add_uint32(Keys.LLM.FEED_FORWARD_LENGTH.format(arch=a), cfg["moe_intermediate_size"])
    writer.add_uint32(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH.format(arch=a), cfg["moe_intermediate_size"])
    writer.add_uint32(
        Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH.format(arch=a), cfg["shared_expert_intermediate_size"]
    )
    writer.add_uint32(Keys.LLM.EXPERT_COUNT.format(arch=a), cfg["num_experts"])
    writer.add_uint32(Keys.LLM.EXPERT_USED_COUNT.format(arch=a), cfg["num_experts_per_tok"])
    writer.add_uint32(Keys.Attention.HEAD_COUNT.format(arch=a), cfg["num_attention_heads"])
    writer.add_uint32(Keys.Attention.HEAD_COUNT_KV.format(arch=a), cfg["num_key_value_heads"])
    writer.add_uint32(Keys.Attention.KEY_LENGTH.format(arch=a), cfg["head_dim"])
    writer.add_uint32(Keys.Attention.VALUE_LENGTH.format(arch=a), cfg["head_dim"])
    writer.add_uint32(Keys.LLM.FULL_ATTENTION_INTERVAL.format(arch=a), cfg["full_attention_interval"])
    writer.add_uint32(Keys.SSM.CONV_KERNEL.format(arch=a), cfg["linear_conv_kernel_dim"])
    writer.add_uint32(
        Keys.SSM.INNER_SIZE.format(arch=a), cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
    )
    writer.add_uint32(Keys.SSM.STATE_SIZE.format(arch=a), cfg["linear_key_head_dim"])
    writer.add_uint32(Keys.SSM.TIME_STEP_RANK.format(arch=a), cfg["linear_num_value_heads"])
    writer.add_uint32(Keys.SSM.GROUP_COUNT.format(arch=a), cfg["linear_num_key_heads"])
    writer.add_uint32(Keys.LLM.VOCAB_SIZE.format(arch=a), cfg["vocab_size"])
    writer.add_string(
        "appliance.skeleton.note", "header only: tensor infos without data; not a loadable model"
    )
    total = 0
    for name, shape, qtype in specs:
        size = nbytes(shape, qtype)
        writer.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), size, raw_dtype=qtype)
        total += size
    out.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file(out)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return total
