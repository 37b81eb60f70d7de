"""The decode routes of a `model synth --like` walk model, predicted in Python without the engine.

Norms are 1, so each MoE layer's top k are those of its router times the layer's input, whatever
the RMS scale; the input is the token's embedding (the walk's designed row, on the grid the file
writes it on) plus what the layers before add to the residual, modelled as two random walks
over the layers: one of RESIDUAL_STEP per dimension, independent per token, and one of
STATIC_STEP, the same for every token of a model (attention and the experts add a part that
changes little from token to token: the engine's picks beyond the proxy's persist from the
first half of a decode to the second). Decode token i is walk token first + i (the prompt
decides `first`; any start on the walk is a sample).

How close that comes to llama-moe-trace is measured in docs/trace-format.md ("The full-shape
synth's walk"; `bench.calibrate_walk --score-only` prints it for a model): close enough to
score a candidate on several model seeds in seconds (bench.calibrate_walk --proxy-seeds),
where the engine takes minutes a seed; the engine then checks what the proxy chose.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGMLQuantizationType

from appliance.models import full_walk, grid_blocks
from appliance.models.full_synth import bitgen_for, plan_for, role
from appliance.trace.format import KIND_DECODE, Trace, row_dtype

RESIDUAL_STEP = 0.04  # per dimension and layer, each token's own (the module's docstring)
STATIC_STEP = 0.04  # per dimension and layer, the same for every token of a model
STATIC_STREAM = 1 << 20  # seeds the static part's draws apart from any token's (whose stream is the start)


@cache
def _plan(like: Path, layers: int, used: int) -> tuple[dict[str, Any], tuple[Any, ...]]:
    doc, specs, _ = plan_for(like, layers, used)
    return doc, tuple(specs)


def embeddings(walk: full_walk.Walk, indices: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """The embedding rows of walk tokens `indices` (modulo the walk) as the file holds them."""
    found = full_walk.designed_rows(walk, "token_embd", walk.first, walk.tokens)
    assert found is not None
    rows = found[1][indices % walk.tokens]
    return grid_blocks.grid_values(rows, qtype, full_walk.step_for(qtype))


def routes(
    like: Path,
    seed: int,
    skew: float,
    layers: int,
    used: int,
    first: int,
    n: int,
    residual: float = RESIDUAL_STEP,
    static: float = STATIC_STEP,
) -> np.ndarray:
    """(MoE layers, n, used) expert ids of decode tokens first .. first + n - 1 on the walk,
    best first, under the walk constants in full_walk now."""
    doc, specs = _plan(like, layers, used)
    embd, vocab = int(doc["config"]["hidden_size"]), int(doc["config"]["vocab_size"])
    walk = full_walk.make_walk(seed, embd, vocab)
    embed_qtype = next(qtype for name, _, qtype in specs if role(name) == "token_embd")
    hidden = embeddings(walk, np.arange(first, first + n), embed_qtype)
    noise = np.random.default_rng([seed, first])
    bias = np.random.default_rng([seed, STATIC_STREAM])
    routers = [(name, shape, qtype) for name, shape, qtype in specs if role(name) == "router"]
    out = np.empty((len(routers), n, used), dtype=np.int64)
    for layer, (name, shape, qtype) in enumerate(routers):
        hidden += residual * noise.standard_normal(hidden.shape, dtype=np.float32)
        hidden += static * bias.standard_normal(hidden.shape[1], dtype=np.float32)
        w = full_walk.router(np.random.Generator(bitgen_for(seed, name)), skew, shape[1], shape[0])
        if qtype == GGMLQuantizationType.F16:
            w = w.astype(np.float16).astype(np.float32)
        out[layer] = np.argsort(-(hidden @ w.T), axis=1, kind="stable")[:, :used]
    return out


def as_trace(ids: np.ndarray, n_experts: int) -> Trace:
    """A decode-only trace of (layers, tokens, k) expert ids, one step a token."""
    layers, n, k = ids.shape
    rows = np.zeros(layers * n, dtype=row_dtype(k, False))
    rows["step"] = np.repeat(np.arange(n), layers)
    rows["layer"] = np.tile(np.arange(layers), n)
    rows["kind"] = KIND_DECODE
    rows["pos"] = np.repeat(np.arange(n), layers)
    rows["ids"] = ids.transpose(1, 0, 2).reshape(layers * n, k)
    header = {
        "format": "moetrace",
        "version": 1,
        "arch": "walk-proxy",
        "n_layers": layers,
        "moe_layers": list(range(layers)),
        "n_experts": n_experts,
        "n_expert_used": k,
        "has_weights": False,
        "n_prompt_tokens": 0,
        "n_predict": n,
    }
    return Trace(header=header, rows=rows)
