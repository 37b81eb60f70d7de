"""Header-only GGUFs of published models: metadata and tensor infos, no weights.

Input is a JSON document (see evidence/plans/*.input.json) with the model's published
configuration, the tensor type recipe and where every number came from. The tensor lists
follow llama.cpp b10229's loaders: src/models/qwen35moe.cpp (separate gate/up expert tensors,
convert_hf_to_gguf's default; the NextN/MTP block is left out) and src/models/qwen3moe.cpp.
The result plans exactly like the real file would if the recipe matched it: `appliance plan`
reads only headers. The same tensor plan and metadata are the skeleton of
`appliance model synth --like` (models/full_synth.py), which adds the weights.

A recipe gives one type per role (`types`) and, optionally, per-layer exceptions
(`type_overrides`: tensor base names such as `ffn_down_exps` or `attn_v`, the layers, the type),
as quantizers give some layers more bits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter, Keys
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from appliance.core.errors import ConfigError
from appliance.core.paths import evidence_dir, repo_root
from appliance.core.strict_load import load_json

COMMON = (
    "hidden_size",
    "num_hidden_layers",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
)
REQUIRED_BY_ARCH = {
    "qwen35moe": (
        *COMMON,
        "shared_expert_intermediate_size",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
        "full_attention_interval",
    ),
    "qwen3moe": COMMON,
}
SUPPORTED_ARCHES = tuple(REQUIRED_BY_ARCH)
# what llama.cpp needs besides the shapes to run the model (rope, norm): optional in a skeleton
# for planning, required by `model synth --like`
RUNTIME_BY_ARCH = {
    "qwen35moe": ("rope_theta", "rms_norm_eps", "partial_rotary_factor", "mrope_section"),
    "qwen3moe": ("rope_theta", "rms_norm_eps"),
}
ROLES = ("routed_gate_up", "routed_down", "matrices", "embeddings", "output", "vectors")

Spec = tuple[str, tuple[int, ...], GGMLQuantizationType]


def _type(name: object, what: str, where: str) -> GGMLQuantizationType:
    try:
        return GGMLQuantizationType[str(name).upper()]
    except KeyError:
        raise ConfigError(
            f"{where}: {what} = {name!r} is not a ggml type name (e.g. IQ4_NL, Q8_0, F32)"
        ) from None


def _layer_tensors(cfg: dict[str, Any], arch: str, i: int, t: dict[str, GGMLQuantizationType]) -> list[Spec]:
    e, x = cfg["hidden_size"], cfg["num_experts"]
    ff = cfg["moe_intermediate_size"]
    heads, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    b = f"blk.{i}."
    out: list[Spec] = [(b + "attn_norm.weight", (e,), t["vectors"])]
    if arch == "qwen35moe":
        out.append((b + "post_attention_norm.weight", (e,), t["vectors"]))
    if arch == "qwen35moe" and (i + 1) % cfg["full_attention_interval"] != 0:
        k_heads, v_heads = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        k_dim, v_dim = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        conv_dim = 2 * k_heads * k_dim + v_heads * v_dim
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
        gate = 2 if arch == "qwen35moe" else 1  # Qwen3.5 fuses an output gate into Q
        out += [
            (b + "attn_q.weight", (e, heads * hd * gate), t["matrices"]),
            (b + "attn_k.weight", (e, kv * hd), t["matrices"]),
            (b + "attn_v.weight", (e, kv * hd), t["matrices"]),
            (b + "attn_output.weight", (heads * hd, e), t["matrices"]),
            (b + "attn_k_norm.weight", (hd,), t["vectors"]),
            (b + "attn_q_norm.weight", (hd,), t["vectors"]),
        ]
    if arch == "qwen3moe":
        out.append((b + "ffn_norm.weight", (e,), t["vectors"]))
    out += [
        (b + "ffn_gate_inp.weight", (e, x), t["vectors"]),
        (b + "ffn_gate_exps.weight", (e, ff, x), t["routed_gate_up"]),
        (b + "ffn_up_exps.weight", (e, ff, x), t["routed_gate_up"]),
        (b + "ffn_down_exps.weight", (ff, e, x), t["routed_down"]),
    ]
    if arch == "qwen35moe":
        sff = cfg["shared_expert_intermediate_size"]
        out += [
            (b + "ffn_gate_inp_shexp.weight", (e,), t["vectors"]),
            (b + "ffn_gate_shexp.weight", (e, sff), t["matrices"]),
            (b + "ffn_up_shexp.weight", (e, sff), t["matrices"]),
            (b + "ffn_down_shexp.weight", (sff, e), t["matrices"]),
        ]
    return out


def base_name(name: str) -> str:
    """`blk.7.ffn_down_exps.weight` -> `ffn_down_exps`; what a type override names."""
    parts = name.split(".")
    core = parts[2:] if parts[0] == "blk" else parts
    return core[0]


def _overrides(doc: dict[str, Any], layers: int, where: str) -> dict[tuple[int, str], GGMLQuantizationType]:
    out: dict[tuple[int, str], GGMLQuantizationType] = {}
    entries = doc.get("type_overrides", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{where}: type_overrides is a list of {{tensors, layers, type}}")
    for n, entry in enumerate(entries):
        what = f"type_overrides[{n}]"
        if not isinstance(entry, dict) or not {"tensors", "layers", "type"} <= set(entry):
            raise ConfigError(f"{where}: {what} needs tensors, layers and type")
        qtype = _type(entry["type"], f"type_overrides[{n}].type", where)
        for layer in entry["layers"]:
            if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < layers:
                raise ConfigError(
                    f"{where}: {what} names layer {layer!r}; the model has layers 0..{layers - 1}"
                )
            for tensor in entry["tensors"]:
                out[(layer, str(tensor))] = qtype
    return out


def tensor_specs(doc: dict[str, Any], where: str, layers: int | None = None) -> list[Spec]:
    """(name, ggml shape, type) of every tensor llama.cpp loads for the input's model, in file
    order; `layers` keeps only the first that many layers (a full-width slice)."""
    arch, cfg = doc["arch"], config(doc)
    recipe = doc.get("types", {})
    t = {role: _type(recipe.get(role), f"types.{role}", where) for role in ROLES}
    overrides = _overrides(doc, cfg["num_hidden_layers"], where)
    e, v = cfg["hidden_size"], cfg["vocab_size"]
    out: list[Spec] = [
        ("token_embd.weight", (e, v), t["embeddings"]),
        ("output_norm.weight", (e,), t["vectors"]),
        ("output.weight", (e, v), t["output"]),
    ]
    used: set[tuple[int, str]] = set()
    for i in range(cfg["num_hidden_layers"]):
        for name, shape, qtype in _layer_tensors(cfg, arch, i, t):
            key = (i, base_name(name))
            if key in overrides:
                used.add(key)
                qtype = overrides[key]
            if layers is None or i < layers:
                out.append((name, shape, qtype))
    unknown = sorted(set(overrides) - used)
    if unknown:
        layer, tensor = unknown[0]
        raise ConfigError(
            f"{where}: type_overrides names {tensor!r} in layer {layer}, which has no such tensor"
        )
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


INPUT_SUFFIX = ".input.json"


def input_path(like: str) -> Path:
    """A skeleton input named by a profile: a repo-relative path (`evidence/plans/X.input.json`)
    or its name (`X`, found in evidence/plans/); refuses one that does not exist."""
    if like.endswith(".json"):
        path = repo_root() / like
    else:
        path = evidence_dir() / "plans" / f"{like}{INPUT_SUFFIX}"
    if not path.is_file():
        raise ConfigError(
            f"skeleton input {like!r} not found (looked for {path}): name one of evidence/plans/*"
            f"{INPUT_SUFFIX} by its name or by its path in the checkout"
        )
    return path


def load_input(path: Path) -> dict[str, Any]:
    try:
        doc = load_json(path)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}; not a skeleton input (a JSON object with arch, config and types)"
        ) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: not a skeleton input (a JSON object with arch, config and types)")
    if doc.get("arch") not in SUPPORTED_ARCHES:
        raise ConfigError(f"{path}: arch {doc.get('arch')!r} not supported ({', '.join(SUPPORTED_ARCHES)})")
    given = doc.get("config")
    if not isinstance(given, dict):
        raise ConfigError(f"{path}: not a skeleton input (no config object)")
    missing = [k for k in REQUIRED_BY_ARCH[doc["arch"]] if k not in given]
    if missing:
        raise ConfigError(f"{path}: config lacks {', '.join(missing)}")
    return doc


def config(doc: dict[str, Any]) -> dict[str, Any]:
    """The configuration values the writers use: integers, and the optional runtime values."""
    given = doc["config"]
    cfg: dict[str, Any] = {k: int(given[k]) for k in REQUIRED_BY_ARCH[doc["arch"]]}
    for key in RUNTIME_BY_ARCH[doc["arch"]]:
        if key in given:
            cfg[key] = given[key]
    return cfg


def add_model_metadata(writer: GGUFWriter, doc: dict[str, Any], layers: int | None = None) -> None:
    """The architecture's hyperparameters (`layers`: the block count of a slice)."""
    a, cfg = doc["arch"], config(doc)
    writer.add_name(str(doc.get("model", "reference model")))
    writer.add_uint32(Keys.LLM.CONTEXT_LENGTH.format(arch=a), cfg["max_position_embeddings"])
    writer.add_uint32(Keys.LLM.EMBEDDING_LENGTH.format(arch=a), cfg["hidden_size"])
    writer.add_uint32(
        Keys.LLM.BLOCK_COUNT.format(arch=a), cfg["num_hidden_layers"] if layers is None else layers
    )
    writer.add_uint32(Keys.LLM.FEED_FORWARD_LENGTH.format(arch=a), cfg["moe_intermediate_size"])
    writer.add_uint32(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH.format(arch=a), cfg["moe_intermediate_size"])
    writer.add_uint32(Keys.LLM.EXPERT_COUNT.format(arch=a), cfg["num_experts"])
    writer.add_uint32(Keys.LLM.EXPERT_USED_COUNT.format(arch=a), cfg["num_experts_per_tok"])
    writer.add_uint32(Keys.Attention.HEAD_COUNT.format(arch=a), cfg["num_attention_heads"])
    writer.add_uint32(Keys.Attention.HEAD_COUNT_KV.format(arch=a), cfg["num_key_value_heads"])
    writer.add_uint32(Keys.Attention.KEY_LENGTH.format(arch=a), cfg["head_dim"])
    writer.add_uint32(Keys.Attention.VALUE_LENGTH.format(arch=a), cfg["head_dim"])
    writer.add_uint32(Keys.LLM.VOCAB_SIZE.format(arch=a), cfg["vocab_size"])
    if "rms_norm_eps" in cfg:
        writer.add_float32(Keys.Attention.LAYERNORM_RMS_EPS.format(arch=a), float(cfg["rms_norm_eps"]))
    if "rope_theta" in cfg:
        writer.add_float32(Keys.Rope.FREQ_BASE.format(arch=a), float(cfg["rope_theta"]))
    if a == "qwen3moe":
        writer.add_uint32(Keys.Rope.DIMENSION_COUNT.format(arch=a), cfg["head_dim"])
        return
    if "partial_rotary_factor" in cfg:
        rope_dim = round(cfg["head_dim"] * float(cfg["partial_rotary_factor"]))
        writer.add_uint32(Keys.Rope.DIMENSION_COUNT.format(arch=a), rope_dim)
    if "mrope_section" in cfg:
        sections = [int(s) for s in cfg["mrope_section"]]
        writer.add_array(Keys.Rope.DIMENSION_SECTIONS.format(arch=a), sections + [0] * (4 - len(sections)))
    writer.add_uint32(
        Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH.format(arch=a), cfg["shared_expert_intermediate_size"]
    )
    writer.add_uint32(Keys.LLM.FULL_ATTENTION_INTERVAL.format(arch=a), cfg["full_attention_interval"])
    writer.add_uint32(Keys.SSM.CONV_KERNEL.format(arch=a), cfg["linear_conv_kernel_dim"])
    writer.add_uint32(
        Keys.SSM.INNER_SIZE.format(arch=a), cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
    )
    writer.add_uint32(Keys.SSM.STATE_SIZE.format(arch=a), cfg["linear_key_head_dim"])
    writer.add_uint32(Keys.SSM.TIME_STEP_RANK.format(arch=a), cfg["linear_num_value_heads"])
    writer.add_uint32(Keys.SSM.GROUP_COUNT.format(arch=a), cfg["linear_num_key_heads"])


def add_tensor_infos(writer: GGUFWriter, specs: list[Spec]) -> int:
    """Declare every tensor; the tensor data size (unpadded)."""
    total = 0
    for name, shape, qtype in specs:
        size = nbytes(shape, qtype)
        writer.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), size, raw_dtype=qtype)
        total += size
    return total


def write_skeleton(input_path: Path, out: Path) -> int:
    """Write the header-only GGUF; returns the tensor data size the real file would have."""
    doc = load_input(input_path)
    specs = tensor_specs(doc, str(input_path))
    writer = GGUFWriter(None, doc["arch"])
    add_model_metadata(writer, doc)
    writer.add_string(
        "appliance.skeleton.note", "header only: tensor infos without data; not a loadable model"
    )
    total = add_tensor_infos(writer, specs)
    out.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file(out)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return total
