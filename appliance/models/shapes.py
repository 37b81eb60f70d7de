"""Shapes of a tiny MoE model: which tensors each architecture needs and how wide the experts are.

The tensor lists follow what llama.cpp b10229 creates in `src/models/qwen3moe.cpp` and
`src/models/qwen35moe.cpp` (load_arch_tensors); llama.cpp refuses a file with missing or
extra tensors, so the lists are exact. Shapes are in ggml order (ne[0] first).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from appliance.core.errors import ApplianceError
from appliance.core.limits import MAX_MODEL_EXPERTS, MAX_MODEL_LAYERS, MAX_SEED
from appliance.core.units import parse_size

ARCHES = ("qwen3moe", "qwen35moe")
EXPERT_TYPES = {"f16": GGMLQuantizationType.F16, "q8_0": GGMLQuantizationType.Q8_0}
FF_STEP = 32  # expert width granularity: a q8_0 block along ne[0] of ffn_down_exps
ALIGNMENT = 32  # GGUF default data alignment
HEADER_ALLOWANCE = 64 * 1024  # metadata, vocabulary and tensor infos stay well below this

F16 = GGMLQuantizationType.F16
F32 = GGMLQuantizationType.F32


@dataclass(frozen=True)
class ModelSynthSpec:
    """What the user asked for. `size_bytes` is an upper bound on the file size."""

    arch: str
    size_bytes: int
    experts: int = 64
    used: int = 8
    layers: int = 4
    skew: float = 1.0
    seed: int = 0
    expert_type: str = "f16"
    embd: int = 256


def spec_from_synth(synth: Mapping[str, Any]) -> ModelSynthSpec:
    """A profile's tiny `model.synth` parameters as the synthesizer's spec."""
    return ModelSynthSpec(
        arch=str(synth["arch"]),
        size_bytes=parse_size(str(synth["size"])),
        experts=int(synth["experts"]),
        used=int(synth["used"]),
        layers=int(synth["layers"]),
        skew=float(synth["skew"]),
        seed=int(synth["seed"]),
        expert_type=str(synth.get("type", "f16")),
    )


@dataclass(frozen=True)
class Dims:
    """Fixed hyperparameters of the tiny models (apart from the expert width)."""

    embd: int
    heads: int = 4
    heads_kv: int = 2
    head_dim: int = 64
    rope_dim_qwen35: int = 16  # partial rotary, as in Qwen3.5 (a quarter of the head)
    ssm_state: int = 32  # head dimension of the gated delta net
    ssm_groups: int = 2  # key heads
    ssm_v_heads: int = 4  # value heads (time_step_rank)
    ssm_conv: int = 4
    shexp_ff: int = 256
    context: int = 4096

    @property
    def ssm_inner(self) -> int:
        return self.ssm_state * self.ssm_v_heads


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: name, ggml shape, type, and the role that says how its values are made."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    role: str
    layer: int = -1
    scale: float = 1.0

    @property
    def nbytes(self) -> int:
        block, type_size = GGML_QUANT_SIZES[self.qtype]
        return math.prod(self.shape) // block * type_size


@dataclass(frozen=True)
class Layout:
    spec: ModelSynthSpec
    dims: Dims
    n_vocab: int
    ff_exp: int
    tensors: list[TensorSpec] = field(default_factory=list)

    @property
    def full_attention_interval(self) -> int:
        return min(4, self.spec.layers)

    def is_recurrent(self, layer: int) -> bool:
        """qwen35moe: every layer but each `interval`-th is a linear-attention (SSM) layer."""
        if self.spec.arch != "qwen35moe":
            return False
        return (layer + 1) % self.full_attention_interval != 0

    @property
    def data_bytes(self) -> int:
        return sum(padded(t.nbytes) for t in self.tensors)


def padded(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def check_spec(spec: ModelSynthSpec) -> None:
    """Refuse shapes llama.cpp cannot load, with the reason."""
    if spec.arch not in ARCHES:
        raise ApplianceError(f"unknown arch {spec.arch!r}: choose one of {', '.join(ARCHES)}")
    if spec.expert_type not in EXPERT_TYPES:
        raise ApplianceError(f"unknown --type {spec.expert_type!r}: choose one of {', '.join(EXPERT_TYPES)}")
    if not 1 <= spec.used <= spec.experts:
        raise ApplianceError(
            f"--used {spec.used} must be between 1 and --experts {spec.experts}: a token cannot "
            "be routed to more experts than the layer has"
        )
    if spec.experts > MAX_MODEL_EXPERTS:
        raise ApplianceError(f"--experts {spec.experts} exceeds llama.cpp's limit of {MAX_MODEL_EXPERTS}")
    min_layers = 2 if spec.arch == "qwen35moe" else 1
    if spec.layers < min_layers:
        raise ApplianceError(
            f"--layers {spec.layers} is too few for {spec.arch}: needs at least {min_layers}"
            + (" (one linear-attention and one full-attention layer)" if min_layers == 2 else "")
        )
    if spec.embd % 256 != 0:
        raise ApplianceError(f"embedding width {spec.embd} must be a multiple of 256")
    if spec.layers > MAX_MODEL_LAYERS:
        raise ApplianceError(f"--layers {spec.layers} exceeds llama.cpp's limit of {MAX_MODEL_LAYERS}")
    if not math.isfinite(spec.skew) or spec.skew < 0:
        raise ApplianceError(f"--skew {spec.skew} must be a finite number >= 0 (0 = uniform random routers)")
    if not 0 <= spec.seed <= MAX_SEED:
        raise ApplianceError(f"--seed {spec.seed} must be from 0 to {MAX_SEED}")


def tensor_list(spec: ModelSynthSpec, dims: Dims, n_vocab: int, ff: int) -> list[TensorSpec]:
    """Every tensor llama.cpp creates for the architecture, in file order."""
    e, x = dims.embd, spec.experts
    etype = EXPERT_TYPES[spec.expert_type]
    q = dims.heads * dims.head_dim
    kv = dims.heads_kv * dims.head_dim
    out: list[TensorSpec] = [
        TensorSpec("token_embd.weight", (e, n_vocab), F16, "token_embd"),
        TensorSpec("output_norm.weight", (e,), F32, "ones"),
        TensorSpec("output.weight", (e, n_vocab), F16, "output"),
    ]
    interval = min(4, spec.layers)
    for i in range(spec.layers):
        b = f"blk.{i}."
        small = 0.1  # layer outputs stay small so the token embedding dominates the residual
        out.append(TensorSpec(b + "attn_norm.weight", (e,), F32, "ones", i))
        recurrent = spec.arch == "qwen35moe" and (i + 1) % interval != 0
        if spec.arch == "qwen35moe":
            out.append(TensorSpec(b + "post_attention_norm.weight", (e,), F32, "ones", i))
        if recurrent:
            key_dim = dims.ssm_state * dims.ssm_groups
            conv_dim = key_dim * 2 + dims.ssm_inner
            out += [
                TensorSpec(b + "attn_qkv.weight", (e, conv_dim), F16, "dense", i),
                TensorSpec(b + "attn_gate.weight", (e, dims.ssm_inner), F16, "dense", i),
                TensorSpec(b + "ssm_conv1d.weight", (dims.ssm_conv, conv_dim), F32, "conv", i),
                TensorSpec(b + "ssm_dt.bias", (dims.ssm_v_heads,), F32, "zeros", i),
                TensorSpec(b + "ssm_a", (dims.ssm_v_heads,), F32, "ssm_a", i),
                TensorSpec(b + "ssm_beta.weight", (e, dims.ssm_v_heads), F16, "dense", i),
                TensorSpec(b + "ssm_alpha.weight", (e, dims.ssm_v_heads), F16, "dense", i),
                TensorSpec(b + "ssm_norm.weight", (dims.ssm_state,), F32, "ones", i),
                TensorSpec(b + "ssm_out.weight", (dims.ssm_inner, e), F16, "dense", i, small),
            ]
        else:
            q_out = q * 2 if spec.arch == "qwen35moe" else q  # Qwen3.5 fuses a gate into Q
            out += [
                TensorSpec(b + "attn_q.weight", (e, q_out), F16, "dense", i),
                TensorSpec(b + "attn_k.weight", (e, kv), F16, "dense", i),
                TensorSpec(b + "attn_v.weight", (e, kv), F16, "dense", i),
                TensorSpec(b + "attn_output.weight", (q, e), F16, "dense", i, small),
                TensorSpec(b + "attn_k_norm.weight", (dims.head_dim,), F32, "ones", i),
                TensorSpec(b + "attn_q_norm.weight", (dims.head_dim,), F32, "ones", i),
            ]
        if spec.arch == "qwen3moe":
            out.append(TensorSpec(b + "ffn_norm.weight", (e,), F32, "ones", i))
        out.append(TensorSpec(b + "ffn_gate_inp.weight", (e, x), F32, "router", i))
        out += [
            TensorSpec(b + "ffn_gate_exps.weight", (e, ff, x), etype, "experts", i),
            TensorSpec(b + "ffn_up_exps.weight", (e, ff, x), etype, "experts", i),
            TensorSpec(b + "ffn_down_exps.weight", (ff, e, x), etype, "experts", i),
        ]
        if spec.arch == "qwen35moe":
            s = dims.shexp_ff
            out += [
                TensorSpec(b + "ffn_gate_inp_shexp.weight", (e,), F16, "dense", i),
                TensorSpec(b + "ffn_gate_shexp.weight", (e, s), F16, "dense", i),
                TensorSpec(b + "ffn_up_shexp.weight", (e, s), F16, "dense", i),
                TensorSpec(b + "ffn_down_shexp.weight", (s, e), F16, "dense", i, small),
            ]
    return out


def solve_layout(spec: ModelSynthSpec, n_vocab: int) -> Layout:
    """Choose the expert width so the file comes as close to `size_bytes` as FF_STEP allows."""
    check_spec(spec)
    dims = Dims(embd=spec.embd)
    fixed = [t for t in tensor_list(spec, dims, n_vocab, FF_STEP) if t.role != "experts"]
    fixed_bytes = sum(padded(t.nbytes) for t in fixed) + HEADER_ALLOWANCE
    block, type_size = GGML_QUANT_SIZES[EXPERT_TYPES[spec.expert_type]]
    per_step = spec.layers * 3 * spec.experts * dims.embd * FF_STEP // block * type_size
    steps = (spec.size_bytes - fixed_bytes) // per_step
    if steps < 1:
        need = fixed_bytes + per_step
        raise ApplianceError(
            f"--size {spec.size_bytes} bytes is too small for {spec.layers} layers x "
            f"{spec.experts} experts ({spec.arch}, {spec.expert_type}): needs at least "
            f"{need} bytes ({need / 2**20:.1f} MiB); raise --size or lower --layers/--experts"
        )
    ff = steps * FF_STEP
    return Layout(spec, dims, n_vocab, ff, tensor_list(spec, dims, n_vocab, ff))
