"""The token walk of a full-size synthetic model: routing that drifts like a real model's.

The tiny synth's routing design (models/weights.py) carried to `model synth --like`, where
the vocabulary runs to hundreds of thousands of tokens and the embedding and output head are
quantized. WALK_TOKENS filler tokens (or as many as the vocabulary has), from the first after
the byte vocabulary and its specials, form a cycle. Token i's embedding is EMBED_SHARED on
dimension 0 (the constant the routers' popularity reads) and a free part that drifts along the
walk (a DRIFT_SHARE share of an AR(1) of correlation DRIFT_CORRELATION, the rest fresh noise:
weights.drifting_noise) and whose fresh noise recurs: REVISIT_SHARE of it is the fresh noise of
a token a heavy-tailed gap back (revisiting), so experts come back after 10-64 tokens as in real
routing without the tokens between keeping them, and ECHO_SHARE of it is the previous token's
(echoing), so a token keeps more of the previous token's experts than of the one two back. The
output head's row for token i + 1 is token i's free part, so greedy decoding, from wherever the
prompt leaves it, steps along the walk (a decode shorter than the walk repeats no token). Every
other row stays random.
Routers are noise plus skew x POPULARITY_GAIN x popularity(rank) on dimension 0 (falling from
1 for the most popular expert to 0 for the least, its curve set by POPULARITY_SHAPE), each
layer's gain spread lognormally (LAYER_GAIN_SPREAD): real models' layers differ in how much of
the previous token's experts they keep (Qwen3-30B-A3B's from 6% to 70%).

The designed rows are written on a uniform grid (models/grid_blocks.py) with the step that
puts EMBED_SHARED on the grid. The constants are calibrated against the real traces' range
at the traced model's shape (docs/trace-format.md, "Synthetic routing against real routing").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf.constants import GGMLQuantizationType

from appliance.models import grid_blocks
from appliance.models.vocab import byte_vocab
from appliance.models.weights import EMBED_SHARED, drifting_noise, rng_for

WALK_TOKENS = 4096  # tokens on the walk (fewer when the vocabulary is smaller): more than any decode
POPULARITY_GAIN = 0.7817  # router weight on dimension 0, most over least popular expert (x skew)
POPULARITY_SHAPE = 0.2025  # the popularity curve's power of rank (popularity() below)
DRIFT_SHARE = 0.2114  # variance share of a walk token's free part that drifts along the walk
DRIFT_CORRELATION = 0.9999  # correlation of the drifting part between consecutive walk tokens
LAYER_GAIN_SPREAD = 0.325  # each layer's gain is POPULARITY_GAIN x exp(this x a standard normal)
REVISIT_SHARE = 0.4969  # variance share of a walk token's fresh noise that is an earlier token's
REVISIT_MIN_GAP = 16.25  # the shortest gap back to the token revisited, in walk tokens
REVISIT_TAIL = 1.675  # gaps are MIN_GAP x a Pareto of this index: a smaller index, longer gaps
ECHO_SHARE = 0.05  # variance share of a walk token's fresh noise that is the previous token's
FIRST_WALK_TOKEN = len(byte_vocab().tokens)  # the first filler token, after bytes, merge and specials


@dataclass(frozen=True)
class Walk:
    first: int  # token id of the walk's first token; token first + i is the walk's i-th
    free: np.ndarray  # (WALK_TOKENS, embd - 1) float32: the free parts, in walk order

    @property
    def tokens(self) -> int:
        return int(self.free.shape[0])


def walk_tokens(n_vocab: int) -> int:
    """The walk's length in a vocabulary of n_vocab tokens (at least 2 make a cycle)."""
    return min(WALK_TOKENS, n_vocab - FIRST_WALK_TOKEN)


def make_walk(seed: int, embd: int, n_vocab: int) -> Walk:
    rng = rng_for(seed, "walk")
    revisits = rng_for(seed, "walk revisits")

    def recur(fresh: np.ndarray) -> np.ndarray:
        return echoing(revisiting(revisits, fresh))

    free = drifting_noise(rng, walk_tokens(n_vocab), embd - 1, DRIFT_SHARE, DRIFT_CORRELATION, recur)
    return Walk(FIRST_WALK_TOKEN, free)


def revisiting(rng: np.random.Generator, fresh: np.ndarray) -> np.ndarray:
    """The walk's fresh noise (rows independent, unit variance) made to recur: each row past
    the first gap takes REVISIT_SHARE of its variance from the row a heavy-tailed gap back
    (itself perhaps a revisit), so an earlier token's experts come back after that gap
    without the tokens between keeping them. Rows stay unit variance."""
    pareto = (1.0 - rng.random(fresh.shape[0])) ** (-1.0 / REVISIT_TAIL)
    gaps = np.floor(REVISIT_MIN_GAP * pareto).astype(np.int64)
    keep, take = np.float32(np.sqrt(1.0 - REVISIT_SHARE)), np.float32(np.sqrt(REVISIT_SHARE))
    recurred = fresh.copy()
    for i, gap in enumerate(gaps):
        if gap <= i:
            recurred[i] = keep * fresh[i] + take * recurred[i - gap]
    return recurred


def echoing(fresh: np.ndarray) -> np.ndarray:
    """Rows of unit variance made to echo: each takes ECHO_SHARE of its variance from the
    row before (the first from the last: the walk is a cycle), so consecutive rows are alike
    and rows two apart are not (a moving average, not a memory). Rows stay unit variance."""
    if ECHO_SHARE == 0:
        return fresh
    keep, take = np.float32(np.sqrt(1.0 - ECHO_SHARE)), np.float32(np.sqrt(ECHO_SHARE))
    return keep * fresh + take * np.roll(fresh, 1, axis=0)


def popularity(experts: int) -> np.ndarray:
    """(experts,) popularity by rank, 1 for the most popular falling to 0 for the least:
    1 - ((rank + 1) ** s - 1) / (experts ** s - 1) for s = POPULARITY_SHAPE (its limit
    1 - log(rank + 1) / log(experts) at 0). s = 1 falls evenly; the smaller s, the more of the
    fall comes at the head (a few hot experts and a flat, long tail); above 1, at the tail."""
    if experts == 1:
        return np.ones(1)
    rank = np.arange(1, experts + 1, dtype=np.float64)
    s = POPULARITY_SHAPE
    fall = np.log(rank) / np.log(experts) if s == 0 else (rank**s - 1) / (experts**s - 1)
    return 1.0 - fall


def router(seed_rng: np.random.Generator, skew: float, experts: int, embd: int) -> np.ndarray:
    """ffn_gate_inp rows (experts, embd): noise on the free dimensions plus skew x popularity
    (of a random ranking) on dimension 0, scaled by the layer's own gain (drawn after the rest)."""
    w = np.zeros((experts, embd), dtype=np.float32)
    w[:, 1:] = seed_rng.standard_normal((experts, embd - 1), dtype=np.float32) / np.sqrt(embd - 1)
    rank = seed_rng.permutation(experts)
    gain = POPULARITY_GAIN * float(np.exp(LAYER_GAIN_SPREAD * seed_rng.standard_normal()))
    w[:, 0] = skew * gain * popularity(experts)[rank]
    return w


def step_for(qtype: GGMLQuantizationType) -> float:
    """The grid step that puts EMBED_SHARED on the grid (its highest code)."""
    if qtype not in grid_blocks.CODE_RANGE:
        return 1.0
    return EMBED_SHARED / grid_blocks.CODE_RANGE[qtype][1]


def designed_rows(walk: Walk, role: str, first_row: int, n_rows: int) -> tuple[slice, np.ndarray] | None:
    """The rows of [first_row, first_row + n_rows) on the walk, as a slice of that chunk and
    their values: embeddings (role token_embd) or output head rows (role output)."""
    lo, hi = max(first_row, walk.first), min(first_row + n_rows, walk.first + walk.tokens)
    if lo >= hi:
        return None
    walk_index = np.arange(lo, hi) - walk.first
    values = np.zeros((hi - lo, walk.free.shape[1] + 1), dtype=np.float32)
    if role == "token_embd":
        values[:, 0] = EMBED_SHARED
        values[:, 1:] = walk.free[walk_index]
    else:  # the head row of walk token i + 1 is token i's free part
        values[:, 1:] = walk.free[(walk_index - 1) % walk.tokens]
    return slice(lo - first_row, hi - first_row), values


def overlay(walk: Walk, role: str, qtype: GGMLQuantizationType, first_row: int, chunk: np.ndarray) -> None:
    """Write the walk's designed rows over a chunk of rows (n_rows, bytes per row) in place."""
    found = designed_rows(walk, role, first_row, chunk.shape[0])
    if found is not None:
        rows, values = found
        chunk[rows] = grid_blocks.grid_blocks(values, qtype, step_for(qtype))
