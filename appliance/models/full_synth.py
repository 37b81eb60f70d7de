"""Full-size synthetic models with the tensor plan of a skeleton input (`model synth --like`).

The tensor list, shapes and ggml types are exactly the skeleton's (models/skeleton.py, one home
for the tensor plan); this module adds weights and a tokenizer so llama.cpp loads and runs the
file. Weights are random but bounded: quantized tensors are random blocks whose fp16 scales
bound every value (models/blocks.py) by sqrt(3 / fan-in) (the range of a uniform fill of
variance 1 / fan-in), so every activation stays finite through all layers; layer outputs
(attn_output, ssm_out, ffn_down_*) are ten times smaller, as in the tiny synth, so the token
embedding dominates the residual. Norms are 1.

Two router designs (`router_design`):
- "walk" (the default): routing calibrated to real models' (models/full_walk.py): a token walk
  that greedy decoding follows, its embeddings drifting along it, routers reading them; the
  random blocks are centered (blocks.centered_blocks), since a Q4_K matrix of random blocks
  leans positive and through 16 or more layers that common push made every token route alike.
- "zipf" (format 1, what the pinned shape profiles were made with): routers are noise plus
  `skew` x a Zipf popularity read from a constant component of every token embedding
  (dimension 0); no drift, and far more next-token reuse than real routing.

The file is written in one streaming pass with bounded memory: the header, then each tensor's
data in chunks of about CHUNK_BYTES, each tensor drawn from its own generator seeded by
(seed, tensor name). Same input, seed, skew, router, layers and experts per token: the same
bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType

from appliance.core import atomic
from appliance.core.errors import ConfigError
from appliance.core.progress import ProgressFn
from appliance.host.filesystems import refuse_unfit_target
from appliance.models import blocks, full_walk, grid_blocks, skeleton
from appliance.models.synth import add_tokenizer, digest_gguf, stream_gguf
from appliance.models.vocab import padded_vocab
from appliance.models.weights import EMBED_SHARED, name_key, zipf_popularity

FULL_SYNTH_FORMAT = 1  # bump when the same input and seed would produce different bytes
CHUNK_BYTES = 16 << 20  # tensor bytes generated and written at a time
OUTPUT_GAIN = 0.1  # layer outputs stay small so the token embedding dominates the residual
EMBED_AMAX = 1.0  # token embedding values lie in [-1, 1], apart from dimension 0 (EMBED_SHARED)
POPULARITY_GAIN = 2.0  # router weight on dimension 0 for the most popular expert (Zipf 1 / rank)
HEADER_SLACK = 1 << 20  # metadata and tensor infos besides the tokens, an upper bound
TOKEN_BYTES = 8 + 4 + len("[synth]")  # a filler token in the header: length, type, text (+ digits)
OUTPUT_PROJECTIONS = ("attn_output", "ssm_out", "ffn_down_exps", "ffn_down_shexp")
FLOAT_ONLY = ("ones", "zeros", "router", "ssm_a", "conv")
ROUTERS = ("walk", "zipf")  # walk: full_walk's calibrated design; zipf: popularity only (format 1)
DEFAULT_ROUTER = "walk"
WALK_ROLES = ("token_embd", "output")  # the tensors holding the walk's designed rows

F32, Q8_0, Q4_K = GGMLQuantizationType.F32, GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_K
SHARED_EMBEDDING_TYPES = (Q8_0, Q4_K)  # token embeddings that can carry the routers' constant


@dataclass(frozen=True)
class FullSynthResult:
    path: Path
    size_bytes: int
    sha256: str
    arch: str
    layers: int
    tensors: int
    expert_bytes: int
    used: int  # experts per token, as the GGUF says
    stale_removed: tuple[Path, ...] = ()


def role(name: str) -> str:
    base = skeleton.base_name(name)
    if base == "token_embd":
        return "token_embd"
    if base == "output":
        return "output"
    if base.endswith("norm"):
        return "ones"
    if base == "ffn_gate_inp":
        return "router"
    if base == "ssm_a":
        return "ssm_a"
    if base == "ssm_dt":
        return "zeros"
    if base == "ssm_conv1d":
        return "conv"
    return "dense"


def amax_for(name: str, shape: tuple[int, ...]) -> float:
    """Bound of a matrix's values: sqrt(3 / fan-in), the bound of a uniform fill of variance
    1 / fan-in, times OUTPUT_GAIN for layer outputs."""
    gain = OUTPUT_GAIN if skeleton.base_name(name) in OUTPUT_PROJECTIONS else 1.0
    return gain * math.sqrt(3.0 / shape[0])


def bitgen_for(seed: int, name: str) -> np.random.SFC64:
    return np.random.SFC64(np.random.SeedSequence([seed, name_key(name)]))


def check_plan(
    specs: list[skeleton.Spec], skew: float, where: str, router_design: str = DEFAULT_ROUTER
) -> None:
    """Refuse, before anything is written, what the writer cannot generate."""
    if router_design not in ROUTERS:
        raise ConfigError(f"router {router_design!r} is not one of {', '.join(ROUTERS)}")
    for name, shape, qtype in specs:
        blocks.refuse_ungenerated(qtype, name, where)
        r = role(name)
        if router_design == "walk" and r in WALK_ROLES:
            refuse_unwalkable(name, shape, qtype, where)
        if r in FLOAT_ONLY and qtype not in blocks.FLOAT_TYPES:
            raise ConfigError(f"{where}: {name} ({r}) must be F32 or F16 to be generated, not {qtype.name}")
        if r == "token_embd" and skew > 0 and qtype not in SHARED_EMBEDDING_TYPES:
            names = " or ".join(t.name for t in SHARED_EMBEDDING_TYPES)
            raise ConfigError(
                f"{where}: routers with --skew {skew:g} read a constant written into a {names} token "
                f"embedding; token_embd is {qtype.name}: use --skew 0 or one of those types"
            )


def refuse_unwalkable(name: str, shape: tuple[int, ...], qtype: GGMLQuantizationType, where: str) -> None:
    if qtype not in grid_blocks.CODE_RANGE:
        names = ", ".join(t.name for t in grid_blocks.CODE_RANGE)
        raise ConfigError(
            f"{where}: the walk router writes designed rows into {name}, which is {qtype.name}; "
            f"give it one of {names}, or use --router zipf"
        )
    if full_walk.walk_tokens(shape[1]) < 2:
        raise ConfigError(
            f"{where}: the walk router needs at least {full_walk.FIRST_WALK_TOKEN + 2} tokens, "
            f"{name} has {shape[1]}; use --router zipf"
        )


def router(seed: int, skew: float, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """ffn_gate_inp rows (experts, embd): noise plus skew x Zipf popularity on dimension 0."""
    embd, experts = shape
    rng = np.random.Generator(bitgen_for(seed, name))
    w = (rng.standard_normal((experts, embd)) / np.sqrt(embd)).astype(np.float32)
    w[:, 0] = skew * POPULARITY_GAIN * zipf_popularity(rng, experts)
    return w


def quantized_chunks(
    seed: int,
    skew: float,
    name: str,
    shape: tuple[int, ...],
    qtype: GGMLQuantizationType,
    walk: full_walk.Walk | None = None,
) -> Iterator[np.ndarray]:
    block, size = GGML_QUANT_SIZES[qtype]
    per_row = shape[0] // block
    rows = math.prod(shape[1:])
    bitgen = bitgen_for(seed, name)
    r = role(name)
    embedding = r == "token_embd"
    amax = EMBED_AMAX if embedding else amax_for(name, shape)
    rows_per_chunk = max(1, CHUNK_BYTES // (per_row * size))
    for first in range(0, rows, rows_per_chunk):
        n = min(rows_per_chunk, rows - first)
        fill = blocks.random_blocks if walk is None else blocks.centered_blocks
        raw = fill(bitgen, qtype, n * per_row, amax)
        if embedding and skew > 0:
            raw.reshape(n, per_row, size)[:, 0, :] = shared_first_block(qtype)
        if walk is not None and r in WALK_ROLES:
            full_walk.overlay(walk, r, qtype, first, raw.reshape(n, per_row * size))
        yield raw


def shared_first_block(qtype: GGMLQuantizationType) -> np.ndarray:
    """The first block of every token embedding row when routers are skewed: element 0 is
    EMBED_SHARED, the rest of the block 0, so dimension 0 is a constant every router reads."""
    _, size = GGML_QUANT_SIZES[qtype]
    block = np.zeros(size, dtype=np.uint8)
    if qtype == Q8_0:  # d, int8 q[32]
        block[0:2] = np.frombuffer(np.float16(EMBED_SHARED / 127).astype("<f2").tobytes(), np.uint8)
        block[2] = 127
    else:  # Q4_K: d, dmin = 0, scales (sub-block 0: scale 63, min 0; others 0), q[0] = 15
        block[0:2] = np.frombuffer(np.float16(EMBED_SHARED / (63 * 15)).astype("<f2").tobytes(), np.uint8)
        block[4] = 63
        block[16] = 0x0F
    return block


def tensor_chunks(
    seed: int,
    skew: float,
    name: str,
    shape: tuple[int, ...],
    qtype: GGMLQuantizationType,
    walk: full_walk.Walk | None = None,
) -> Iterator[np.ndarray]:
    """A tensor's bytes in chunks of about CHUNK_BYTES (uint8 or float arrays); with a walk,
    its designed embedding and head rows and its routers."""
    if qtype not in blocks.FLOAT_TYPES:
        yield from quantized_chunks(seed, skew, name, shape, qtype, walk)
        return
    dtype = np.dtype("<f4") if qtype == F32 else np.dtype("<f2")
    r = role(name)
    if r == "router" and walk is not None:
        rng = np.random.Generator(bitgen_for(seed, name))
        yield full_walk.router(rng, skew, shape[1], shape[0]).astype(dtype)
        return
    if r == "router":
        yield router(seed, skew, name, shape).astype(dtype)
        return
    total = math.prod(shape)
    step = max(1, CHUNK_BYTES // dtype.itemsize)
    rng = np.random.Generator(bitgen_for(seed, name))  # one stream across the chunks
    amax = EMBED_AMAX if r == "token_embd" else amax_for(name, shape)
    for first in range(0, total, step):
        n = min(step, total - first)
        if r == "ones":
            values = np.ones(n)
        elif r == "zeros":
            values = np.zeros(n)
        elif r == "ssm_a":
            values = -rng.uniform(0.5, 2.0, size=n)
        elif r == "conv":
            values = 0.5 * rng.standard_normal(n)
        else:
            values = rng.uniform(-amax, amax, size=n)
        yield values.astype(dtype)


def plan_for(
    input_path: Path, layers: int | None, used: int | None = None
) -> tuple[dict[str, Any], list[skeleton.Spec], int]:
    """The input (with `used` as its experts per token when given), its tensor plan of the first
    `layers` layers (all when None) and that layer count; refuses what cannot be written."""
    doc = skeleton.load_input(input_path)
    where = str(input_path)
    model_layers = int(doc["config"]["num_hidden_layers"])
    if layers is not None and not 1 <= layers <= model_layers:
        raise ConfigError(f"--layers {layers} is outside 1..{model_layers}, the layers of {input_path.name}")
    if used is not None:
        experts = int(doc["config"]["num_experts"])
        if not 1 <= used <= experts:
            raise ConfigError(
                f"--used {used} is outside 1..{experts}, the experts per layer of {input_path.name}"
            )
        doc = {**doc, "config": {**doc["config"], "num_experts_per_tok": used}}
    interval = int(doc["config"].get("full_attention_interval", 1))
    if layers is not None and layers < interval <= model_layers:
        raise ConfigError(
            f"--layers {layers} of {input_path.name} holds no attention layer (one in "
            f"{interval}, layer {interval} the first): llama.cpp cannot run a hybrid model "
            f"without one; use --layers {interval} or more"
        )
    missing = [k for k in skeleton.RUNTIME_BY_ARCH[doc["arch"]] if k not in doc["config"]]
    if missing:
        raise ConfigError(
            f"{where}: config lacks {', '.join(missing)}, which llama.cpp needs to run the model; "
            "add them with their source"
        )
    specs = skeleton.tensor_specs(doc, where, layers)
    return doc, specs, model_layers if layers is None else layers


def _writer(
    input_path: Path,
    doc: dict[str, Any],
    specs: list[skeleton.Spec],
    n_layers: int,
    seed: int,
    skew: float,
    router_design: str,
) -> GGUFWriter:
    """The GGUF writer with the model's metadata, tokenizer, synth parameters and tensor infos."""
    writer = GGUFWriter(None, doc["arch"])
    skeleton.add_model_metadata(writer, doc, n_layers)
    add_tokenizer(writer, padded_vocab(int(doc["config"]["vocab_size"])))
    writer.add_uint32("appliance.synth.format", FULL_SYNTH_FORMAT)
    writer.add_uint32("appliance.synth.seed", seed)
    writer.add_float32("appliance.synth.skew", skew)
    writer.add_string("appliance.synth.like", input_path.name)
    if router_design != "zipf":  # format 1's files, written before the walk, name no router
        writer.add_string("appliance.synth.router", router_design)
    skeleton.add_tensor_infos(writer, specs)
    return writer


def _data_bytes(specs: list[skeleton.Spec]) -> int:
    align = GGUF_DEFAULT_ALIGNMENT  # the writer adds no general.alignment key
    return sum(skeleton.nbytes(shape, q) + -skeleton.nbytes(shape, q) % align for _, shape, q in specs)


def _tensor_streams(
    doc: dict[str, Any], specs: list[skeleton.Spec], seed: int, skew: float, router_design: str
) -> Iterator[Iterator[memoryview]]:
    cfg = doc["config"]
    walk = (
        full_walk.make_walk(seed, int(cfg["hidden_size"]), int(cfg["vocab_size"]))
        if router_design == "walk"
        else None
    )
    return (
        (
            np.ascontiguousarray(chunk).reshape(-1).view(np.uint8).data
            for chunk in tensor_chunks(seed, skew, *spec, walk)
        )
        for spec in specs
    )


def digest_like(
    input_path: Path,
    seed: int = 0,
    skew: float = 1.0,
    layers: int | None = None,
    progress: ProgressFn | None = None,
    used: int | None = None,
    router_design: str = DEFAULT_ROUTER,
) -> tuple[int, str]:
    """The size and sha256 synthesize_like would write with these parameters, without writing
    the file (the same stream, hashed only: what a profile pins, at no disk cost)."""
    doc, specs, n_layers = plan_for(input_path, layers, used)
    check_plan(specs, skew, str(input_path), router_design)
    writer = _writer(input_path, doc, specs, n_layers, seed, skew, router_design)
    return digest_gguf(
        writer, _tensor_streams(doc, specs, seed, skew, router_design), _data_bytes(specs), progress
    )


def synthesize_like(
    input_path: Path,
    out: Path,
    seed: int = 0,
    skew: float = 1.0,
    layers: int | None = None,
    progress: ProgressFn | None = None,
    used: int | None = None,
    router_design: str = DEFAULT_ROUTER,
) -> FullSynthResult:
    """Write the input's model with random bounded weights to `out` (through a temporary name,
    renamed when whole); `layers` writes the first that many layers only, `used` sets the
    experts each token routes to (the GGUF's expert_used_count; default: the input's)."""
    doc, specs, n_layers = plan_for(input_path, layers, used)
    check_plan(specs, skew, str(input_path), router_design)
    atomic.refuse_special(out)
    n_vocab = int(doc["config"]["vocab_size"])
    data_bytes = _data_bytes(specs)
    header_bound = n_vocab * (TOKEN_BYTES + len(str(n_vocab))) + HEADER_SLACK
    refuse_unfit_target(out, data_bytes + header_bound, f"the {n_layers}-layer model")
    writer = _writer(input_path, doc, specs, n_layers, seed, skew, router_design)
    stale = atomic.remove_stale_temporaries(out)
    sha256 = stream_gguf(
        writer, out, _tensor_streams(doc, specs, seed, skew, router_design), data_bytes, progress
    )
    expert_bytes = sum(skeleton.nbytes(s, q) for n, s, q in specs if skeleton.base_name(n).endswith("_exps"))
    return FullSynthResult(
        out,
        out.stat().st_size,
        sha256,
        doc["arch"],
        n_layers,
        len(specs),
        expert_bytes,
        int(doc["config"]["num_experts_per_tok"]),
        tuple(stale),
    )
