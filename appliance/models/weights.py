"""Values of a tiny model, designed so that routing behaves like a real MoE's.

The residual stream is dominated by the token embedding (every layer writes only a small
update), so the router input is, to first order, the embedding of the current token. An
embedding has three parts on separate coordinates: a constant component (dim 0), a
cluster component (dims 1..CLUSTERS) and a random "free" part (the rest).

- The LM head maps the free part of token v's embedding to token next(v), a fixed walk
  that visits every normal token and stays inside one cluster for a stretch: greedy decoding
  follows the walk, consecutive tokens share a cluster.
- A router row is random noise on the free dimensions (uniform routing, `skew` 0) plus
  `skew` times a structured part: a Zipf popularity read from the constant component
  (heavy-tailed expert popularity per layer) and a bonus for the experts preferred by each
  cluster (locality: a token routes like the previous one). `skew` 1 is strongly structured.

Every tensor's values come from a generator seeded by (seed, tensor name): the bytes do not
depend on write order or chunking.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from appliance.models.shapes import Layout, TensorSpec
from appliance.models.vocab import Vocab

CLUSTERS = 8
EMBED_SHARED = 4.0  # size of the constant and cluster components of an embedding
POPULARITY_GAIN = 2.0  # router weight on the constant component for the most popular expert
CLUSTER_GAIN = 1.0  # router weight on the cluster component for a cluster's preferred experts
F16_EXPERT_EXPONENT = 9  # expert f16 values: random sign and mantissa, magnitude in [2^-6, 2^-5)
Q8_0_SCALE = np.float16(2.0**-12)  # expert q8_0 blocks: random int8 times this scale


def name_key(name: str) -> int:
    """A tensor name as a 64-bit seed component: each tensor draws its own stream."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def rng_for(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, name_key(name)])


@dataclass(frozen=True)
class Design:
    """The pieces shared by several tensors: embeddings, the token walk, token clusters."""

    embeddings: np.ndarray  # (n_vocab, embd) float32
    next_token: np.ndarray  # (n_vocab,) int, -1 for tokens off the walk (specials)
    cluster: np.ndarray  # (n_vocab,) int, -1 for specials
    free_dims: slice


def make_design(layout: Layout, vocab: Vocab) -> Design:
    seed, embd, n_vocab = layout.spec.seed, layout.dims.embd, layout.n_vocab
    rng = rng_for(seed, "design")
    free = slice(1 + CLUSTERS, embd)
    emb = np.zeros((n_vocab, embd), dtype=np.float32)
    emb[:, free] = rng.standard_normal((n_vocab, embd - 1 - CLUSTERS), dtype=np.float32)
    emb[:, 0] = EMBED_SHARED
    walk = rng.permutation(np.array(vocab.normal_ids))
    next_token = np.full(n_vocab, -1, dtype=np.int64)
    cluster = np.full(n_vocab, -1, dtype=np.int64)
    for i, tok in enumerate(walk):
        next_token[tok] = walk[(i + 1) % len(walk)]
        cluster[tok] = i * CLUSTERS // len(walk)
        emb[tok, 1 + cluster[tok]] = EMBED_SHARED
    return Design(emb, next_token, cluster, free)


def zipf_popularity(rng: np.random.Generator, experts: int) -> np.ndarray:
    """Popularity 1/rank over a random ranking of the experts, in (0, 1]."""
    rank = rng.permutation(experts)
    return (1.0 / (rank + 1.0)).astype(np.float32)


def router(layout: Layout, design: Design, t: TensorSpec) -> np.ndarray:
    """ffn_gate_inp rows (experts, embd): noise on free dims plus skew x structure."""
    spec, embd = layout.spec, layout.dims.embd
    rng = rng_for(spec.seed, t.name)
    n_free = embd - design.free_dims.start
    w = np.zeros((spec.experts, embd), dtype=np.float32)
    w[:, design.free_dims] = rng.standard_normal((spec.experts, n_free)) / np.sqrt(n_free)
    pop = zipf_popularity(rng, spec.experts)
    w[:, 0] += spec.skew * POPULARITY_GAIN * pop
    p = pop / pop.sum()
    for c in range(CLUSTERS):
        preferred = rng.choice(spec.experts, size=spec.used, replace=False, p=p)
        w[preferred, 1 + c] += spec.skew * CLUSTER_GAIN
    return w


def output_head(design: Design) -> np.ndarray:
    """LM head rows (n_vocab, embd): row next(v) is the free part of v's embedding."""
    out = np.zeros_like(design.embeddings)
    for tok, nxt in enumerate(design.next_token):
        if nxt >= 0:
            out[nxt, design.free_dims] = design.embeddings[tok, design.free_dims]
    return out


def dense_values(layout: Layout, design: Design, t: TensorSpec) -> np.ndarray:
    """Values of a non-expert tensor, in numpy order (reversed ggml shape)."""
    shape = tuple(reversed(t.shape))
    if t.role == "token_embd":
        return design.embeddings
    if t.role == "output":
        return output_head(design)
    if t.role == "router":
        return router(layout, design, t)
    if t.role == "ones":
        return np.ones(shape, dtype=np.float32)
    if t.role == "zeros":
        return np.zeros(shape, dtype=np.float32)
    rng = rng_for(layout.spec.seed, t.name)
    if t.role == "ssm_a":
        return -rng.uniform(0.5, 2.0, size=shape).astype(np.float32)
    if t.role == "conv":
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)
    if t.role == "dense":
        fan_in = t.shape[0]
        return (t.scale / np.sqrt(fan_in) * rng.standard_normal(shape)).astype(np.float32)
    raise ValueError(f"no generator for role {t.role!r} ({t.name})")


def dense_bytes(layout: Layout, design: Design, t: TensorSpec) -> bytes:
    values = dense_values(layout, design, t)
    dtype = np.float16 if t.qtype == GGMLQuantizationType.F16 else np.float32
    data = np.ascontiguousarray(values, dtype=dtype).astype("<" + np.dtype(dtype).str[1:])
    assert data.nbytes == t.nbytes, t.name
    return data.tobytes()


def expert_slabs(layout: Layout, t: TensorSpec) -> Iterator[bytes]:
    """The bytes of an expert tensor, one expert at a time (contiguous in the file)."""
    rng = rng_for(layout.spec.seed, t.name)
    per_expert = t.nbytes // t.shape[2]
    for _ in range(t.shape[2]):
        if t.qtype == GGMLQuantizationType.F16:
            bits = np.frombuffer(rng.bytes(per_expert), dtype="<u2")
            slab = (bits & np.uint16(0x83FF)) | np.uint16(F16_EXPERT_EXPONENT << 10)
            yield slab.astype("<u2").tobytes()
        elif t.qtype == GGMLQuantizationType.Q8_0:
            _, size = GGML_QUANT_SIZES[t.qtype]
            raw = np.frombuffer(rng.bytes(per_expert), dtype=np.uint8).reshape(-1, size).copy()
            raw[:, 0:2] = np.frombuffer(Q8_0_SCALE.astype("<f2").tobytes(), dtype=np.uint8)
            yield raw.tobytes()
        else:
            raise ValueError(f"no expert generator for type {t.qtype.name}")
