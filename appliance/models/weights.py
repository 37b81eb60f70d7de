"""Values of a tiny model, designed so that routing behaves like a real MoE's.

The residual stream is dominated by the token embedding (every layer writes only a small
update), so the router input is, to first order, the embedding of the current token. An
embedding has two parts on separate coordinates: a constant component (dim 0) and a random
"free" part (the rest).

- The LM head maps the free part of token v's embedding to token next(v), a fixed walk
  that visits every normal token: greedy decoding follows the walk (no token repeats within
  a cycle of the walk).
- Along the walk the free parts drift: each is DRIFT_SHARE of a slowly varying component
  (correlation DRIFT_CORRELATION from one walk token to the next) plus fresh noise, so a
  token routes a little like the tokens before it, less so the further back (real routing's
  temporal locality), while the next token's own free part still wins the LM head by far.
- A router row is random noise on the free dimensions plus `skew` times a popularity read
  from the constant component: 1 / rank ** POPULARITY_EXPONENT over a random ranking of the
  experts, times POPULARITY_GAIN (heavy-tailed expert popularity per layer). `skew` 0 leaves
  the noise only (no popular experts).

The constants are calibrated so that a model of 128 experts, k = 4 (the demo's) decoding
64 tokens lies inside the range of three real models' traces on the locality statistics
(appliance.trace.calibration; docs/trace-format.md, "Synthetic routing against real
routing"). An earlier design gave every token a cluster (stretches of the walk) whose
preferred k experts got a large bonus, so consecutive tokens chose nearly the same experts:
88% next-token reuse, where real models keep 18-38%.

Every tensor's values come from a generator seeded by (seed, tensor name): the bytes do not
depend on write order or chunking.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from appliance.models.shapes import Layout, TensorSpec
from appliance.models.vocab import Vocab

EMBED_SHARED = 4.0  # size of the constant component of an embedding
POPULARITY_GAIN = 1.58  # router weight on the constant component for the most popular expert
POPULARITY_EXPONENT = 0.11  # popularity 1 / rank ** this: a mild tail, most experts in use
DRIFT_SHARE = 0.39  # variance share of an embedding's free part that drifts along the walk
DRIFT_CORRELATION = 0.969  # correlation of the drifting part between consecutive walk tokens
F16_EXPERT_EXPONENT = 9  # expert f16 values: random sign and mantissa, magnitude in [2^-6, 2^-5)
Q8_0_SCALE = np.float16(2.0**-12)  # expert q8_0 blocks: random int8 times this scale


def name_key(name: str) -> int:
    """A tensor name as a 64-bit seed component: each tensor draws its own stream."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def rng_for(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, name_key(name)])


@dataclass(frozen=True)
class Design:
    """The pieces shared by several tensors: embeddings and the token walk."""

    embeddings: np.ndarray  # (n_vocab, embd) float32
    next_token: np.ndarray  # (n_vocab,) int, -1 for tokens off the walk (specials)
    free_dims: slice


def drifting_noise(
    rng: np.random.Generator,
    n: int,
    width: int,
    share: float | None = None,
    correlation: float | None = None,
    recur: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """n rows of unit-variance noise whose rows drift: row i is sqrt(share) x an AR(1)
    process (`correlation` from row i - 1) plus fresh noise for the rest (defaults: the tiny
    synth's DRIFT_SHARE and DRIFT_CORRELATION). `recur`, when given, maps the fresh rows to
    unit-variance rows that repeat earlier ones (full_walk.revisiting)."""
    share = DRIFT_SHARE if share is None else share
    correlation = DRIFT_CORRELATION if correlation is None else correlation
    fresh = rng.standard_normal((n, width), dtype=np.float32)
    steps = rng.standard_normal((n, width), dtype=np.float32)
    slow = np.empty((n, width), dtype=np.float32)
    slow[0] = steps[0]
    keep, add = correlation, np.sqrt(1.0 - correlation**2)
    for i in range(1, n):
        slow[i] = keep * slow[i - 1] + add * steps[i]
    if recur is not None:
        fresh = recur(fresh)
    mixed = np.sqrt(share) * slow + np.sqrt(1.0 - share) * fresh
    return mixed.astype(np.float32)


def make_design(layout: Layout, vocab: Vocab) -> Design:
    seed, embd, n_vocab = layout.spec.seed, layout.dims.embd, layout.n_vocab
    rng = rng_for(seed, "design")
    free = slice(1, embd)
    emb = np.zeros((n_vocab, embd), dtype=np.float32)
    emb[:, free] = rng.standard_normal((n_vocab, embd - 1), dtype=np.float32)
    emb[:, 0] = EMBED_SHARED
    walk = rng.permutation(np.array(vocab.normal_ids))
    emb[walk, free] = drifting_noise(rng, len(walk), embd - 1)
    next_token = np.full(n_vocab, -1, dtype=np.int64)
    next_token[walk] = np.roll(walk, -1)
    return Design(emb, next_token, free)


def zipf_popularity(rng: np.random.Generator, experts: int, exponent: float = 1.0) -> np.ndarray:
    """Popularity 1 / rank ** exponent over a random ranking of the experts, in (0, 1]."""
    rank = rng.permutation(experts)
    return (1.0 / (rank + 1.0) ** exponent).astype(np.float32)


def router(layout: Layout, design: Design, t: TensorSpec) -> np.ndarray:
    """ffn_gate_inp rows (experts, embd): noise on free dims plus skew x popularity."""
    spec, embd = layout.spec, layout.dims.embd
    rng = rng_for(spec.seed, t.name)
    n_free = embd - design.free_dims.start
    w = np.zeros((spec.experts, embd), dtype=np.float32)
    w[:, design.free_dims] = rng.standard_normal((spec.experts, n_free)) / np.sqrt(n_free)
    pop = zipf_popularity(rng, spec.experts, POPULARITY_EXPONENT)
    w[:, 0] += spec.skew * POPULARITY_GAIN * pop
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
