"""Synthetic route traces with controllable skew and temporal correlation, deterministic by seed.

Each MoE layer gets its own Zipf-like expert popularity (weight of the r-th most popular expert
proportional to 1 / r**skew, the ranking a seeded permutation per layer). A token picks its k
experts at a layer by, for each slot, re-using the previous token's expert in that slot with
probability `correlation`, otherwise drawing from the layer's popularity; duplicates are
redrawn so a token's k experts are distinct. The prompt is evaluated in micro-batches of
`n_ubatch` tokens (one step each), then `n_decode` single-token decode steps follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from appliance.core.errors import ConfigError
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, Trace, row_dtype


@dataclass(frozen=True)
class TraceSynthSpec:
    """Shape and statistics of a synthetic trace."""

    n_layers: int = 4
    n_experts: int = 32
    k: int = 4
    n_prompt: int = 32
    n_ubatch: int = 16
    n_decode: int = 64
    skew: float = 1.0
    correlation: float = 0.3
    seed: int = 0

    def validate(self) -> None:
        if self.n_layers < 1 or self.n_experts < 1 or not 1 <= self.k <= self.n_experts:
            raise ConfigError(
                f"synthetic trace needs layers >= 1 and 1 <= k <= experts, got "
                f"layers={self.n_layers}, experts={self.n_experts}, k={self.k}"
            )
        if self.n_prompt < 0 or self.n_decode < 0 or self.n_prompt + self.n_decode == 0:
            raise ConfigError("synthetic trace needs at least one prompt or decode token")
        if not 0 <= self.seed < 1 << 64:
            raise ConfigError(f"seed must be from 0 to 2**64 - 1, got {self.seed}")
        if self.n_ubatch < 1:
            raise ConfigError(f"n_ubatch must be >= 1, got {self.n_ubatch}")
        if not math.isfinite(self.skew) or self.skew < 0 or not 0.0 <= self.correlation <= 1.0:
            raise ConfigError(
                f"skew must be >= 0 and correlation in [0, 1], got skew={self.skew}, "
                f"correlation={self.correlation}"
            )


@njit(cache=True)
def _route(
    cdf: np.ndarray, ranks: np.ndarray, k: int, n_tokens: int, correlation: float, uniforms: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """Expert ids (layers, tokens, k) from per-layer cumulative popularity and random draws."""
    n_layers, n_experts = cdf.shape
    out = np.empty((n_layers, n_tokens, k), dtype=np.int32)
    used = np.zeros(n_experts, dtype=np.int64)
    stamp = 0
    u = 0
    n_u = uniforms.shape[0]
    for layer in range(n_layers):
        for tok in range(n_tokens):
            stamp += 1
            for slot in range(k):
                expert = -1
                if tok > 0 and uniforms[u] < correlation:
                    candidate = out[layer, tok - 1, slot]
                    if used[candidate] != stamp:
                        expert = candidate
                u = (u + 1) % n_u
                while expert < 0:
                    r = np.searchsorted(cdf[layer], uniforms[u] * cdf[layer, n_experts - 1], side="right")
                    u = (u + 1) % n_u
                    candidate = ranks[layer, min(r, n_experts - 1)]
                    if used[candidate] != stamp:
                        expert = candidate
                used[expert] = stamp
                out[layer, tok, slot] = expert
    return out


def synth_trace(spec: TraceSynthSpec) -> Trace:
    """Build a synthetic trace in memory (rows in the spec's evaluation order)."""
    spec.validate()
    rng = np.random.Generator(np.random.PCG64(spec.seed))
    weights = 1.0 / np.arange(1, spec.n_experts + 1, dtype=np.float64) ** spec.skew
    cdf = np.tile(np.cumsum(weights), (spec.n_layers, 1))
    ranks = np.stack([rng.permutation(spec.n_experts) for _ in range(spec.n_layers)])
    ranks = ranks.astype(np.int64)
    n_tokens = spec.n_prompt + spec.n_decode
    uniforms = rng.random(spec.n_layers * n_tokens * spec.k * 4 + 1024)
    ids = _route(cdf, ranks, spec.k, n_tokens, spec.correlation, uniforms)

    # Steps: prompt micro-batches, then one step per decode token.
    token_step = np.empty(n_tokens, dtype=np.uint32)
    token_step[: spec.n_prompt] = np.arange(spec.n_prompt) // spec.n_ubatch
    n_prompt_steps = -(-spec.n_prompt // spec.n_ubatch)
    token_step[spec.n_prompt :] = n_prompt_steps + np.arange(spec.n_decode)
    step_start = np.searchsorted(token_step, np.arange(int(token_step[-1]) + 1))
    step_end = np.append(step_start[1:], n_tokens)

    rows = np.zeros(n_tokens * spec.n_layers, dtype=row_dtype(spec.k, False))
    # Row order: step, layer, position. Build per step blocks of (layer, token).
    order_tok = []
    order_layer = []
    for start, end in zip(step_start, step_end, strict=True):
        toks = np.arange(start, end)
        order_tok.append(np.tile(toks, spec.n_layers))
        order_layer.append(np.repeat(np.arange(spec.n_layers), end - start))
    tok_idx = np.concatenate(order_tok)
    layer_idx = np.concatenate(order_layer)
    rows["step"] = token_step[tok_idx]
    rows["layer"] = layer_idx
    rows["kind"] = np.where(tok_idx < spec.n_prompt, KIND_PROMPT, KIND_DECODE)
    rows["pos"] = tok_idx
    rows["ids"] = ids[layer_idx, tok_idx]
    return Trace(header=synth_header(spec), rows=rows)


def synth_header(spec: TraceSynthSpec) -> dict[str, Any]:
    return {
        "format": "moetrace",
        "version": 1,
        "arch": "synthetic",
        "model_file": "synthetic",
        "model_bytes": 0,
        "model_sha256": None,
        "n_layers": spec.n_layers,
        "moe_layers": list(range(spec.n_layers)),
        "n_experts": spec.n_experts,
        "n_expert_used": spec.k,
        "has_weights": False,
        "engine": {"tool": "appliance trace synth", "llama_build": None, "backend": None},
        "n_prompt_tokens": spec.n_prompt,
        "n_predict": spec.n_decode,
        "n_ubatch": spec.n_ubatch,
        "synthetic": {"skew": spec.skew, "correlation": spec.correlation, "seed": spec.seed},
    }
