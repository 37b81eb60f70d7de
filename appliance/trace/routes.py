"""Routes files: a route trace's expert ids by token position, for `llama-moe-trace --routes-from`.

Route forcing (patch 0005) overwrites the router's top-k ids at every MoE layer and step with
the ids a routes file holds for those tokens. The tool reads this small flat form rather than a
`.moetrace` (no JSON in C++); the trace is read and checked here. Little-endian layout:

    b"MOEROUTE"
    u32 version (1), n_layers, n_experts, k, n_moe, n_prompt, n_decode
    u32 moe_layers[n_moe]
    i32 ids[n_prompt + n_decode][n_moe][k]

The size is exact. Ids are indexed by token position (prompt first), not by step, so the run
may split its prompt into micro-batches differently from the recorded run. `layers` N keeps the
first N layers of the model (the routes of a slice that `model synth --layers N` writes).

One gap is filled rather than refused: llama.cpp computes only the prompt's last token at the
model's last layer when it needs only that token's logits, so a trace recorded that way (the
public route traces) has no routes there for the earlier prompt tokens. Those tokens get the last
prompt token's experts: the forced run then reads exactly the experts the recorded run read in
the prompt's step at that layer (the tool computes every prompt token at every layer).
"""

from __future__ import annotations

import struct

import numpy as np

from appliance.core.errors import ConfigError
from appliance.trace.format import KIND_PROMPT, Trace

ROUTES_MAGIC = b"MOEROUTE"
ROUTES_VERSION = 1
ROUTES_SUFFIX = ".routes"


def routes_bytes(trace: Trace, where: str = "trace", layers: int | None = None) -> bytes:
    """The routes file of `trace` (of its model's first `layers` layers when given); refuses a
    trace that does not route every token at every MoE layer exactly once, with prompt tokens
    first, or that names an expert twice for a token."""
    rows = trace.rows
    if not len(rows):
        raise ConfigError(f"{where}: the trace has no rows, so there are no routes to force")
    n_layers = int(trace.header["n_layers"])
    layers_kept = trace.moe_layers
    if layers is not None:
        if not 1 <= layers <= n_layers:
            raise ConfigError(f"--layers {layers} is outside 1..{n_layers}, the layers of {where}'s model")
        layers_kept = [layer for layer in layers_kept if layer < layers]
        if not layers_kept:
            raise ConfigError(f"{where}: no MoE layer among the first {layers}; there are no routes to force")
        rows = rows[rows["layer"] < layers]
        n_layers = layers
    last_layer = int(trace.header["n_layers"]) - 1
    per_layer = []
    for layer in layers_kept:
        mine = rows[rows["layer"] == layer]
        if layer == last_layer:
            mine = _fill_last_layer_prompt(mine)
        if not np.array_equal(mine["pos"], np.arange(len(mine), dtype=mine["pos"].dtype)):
            raise ConfigError(
                f"{where}: MoE layer {layer} does not route token positions 0, 1, 2, ... once each "
                "in order; route forcing needs every token of one sequence at every MoE layer"
            )
        per_layer.append(mine)
    n_tokens = len(per_layer[0])
    if any(len(mine) != n_tokens for mine in per_layer):
        counts = ", ".join(
            f"layer {layer}: {len(mine)}" for layer, mine in zip(layers_kept, per_layer, strict=True)
        )
        raise ConfigError(f"{where}: MoE layers route different numbers of tokens ({counts})")
    prompt = per_layer[0]["kind"] == KIND_PROMPT
    n_prompt = int(prompt.sum())
    if n_prompt == 0 or prompt[:n_prompt].sum() != n_prompt:
        raise ConfigError(f"{where}: route forcing needs the prompt's tokens first, and at least one")
    ids = np.stack([mine["ids"] for mine in per_layer], axis=1).astype("<i4")  # [token][layer][slot]
    ordered = np.sort(ids, axis=2)
    repeated = np.nonzero((ordered[:, :, 1:] == ordered[:, :, :-1]).any(axis=2))
    if len(repeated[0]):
        token, index = int(repeated[0][0]), int(repeated[1][0])
        raise ConfigError(
            f"{where}: token {token} chose an expert twice at MoE layer {layers_kept[index]}; "
            "a router chooses k distinct experts"
        )
    head = struct.pack(
        "<8s7I",
        ROUTES_MAGIC,
        ROUTES_VERSION,
        n_layers,
        trace.n_experts,
        trace.k,
        len(layers_kept),
        n_prompt,
        n_tokens - n_prompt,
    )
    return head + np.asarray(layers_kept, dtype="<u4").tobytes() + ids.tobytes()


def last_layer_prompt_gap(trace: Trace) -> int:
    """The prompt tokens the trace does not route at the model's last layer because llama.cpp
    computed only the prompt's last token there (0 when the trace routes them all)."""
    last = int(trace.header["n_layers"]) - 1
    mine = trace.rows[trace.rows["layer"] == last]
    return len(_fill_last_layer_prompt(mine)) - len(mine)


def _fill_last_layer_prompt(mine: np.ndarray) -> np.ndarray:
    """The last layer's rows with the earlier prompt tokens routed like the prompt's last one,
    when the rows start with that token alone (p > 0) and go on at p + 1, p + 2, ...; else as
    they are."""
    if not len(mine) or mine["kind"][0] != KIND_PROMPT or (mine["kind"] == KIND_PROMPT).sum() != 1:
        return mine
    first = int(mine["pos"][0])
    if first == 0 or not np.array_equal(mine["pos"], np.arange(first, first + len(mine))):
        return mine
    filled = np.concatenate([np.repeat(mine[:1], first), mine])
    filled["pos"] = np.arange(len(filled))
    return filled


def read_routes(data: bytes, where: str = "routes file") -> tuple[list[int], np.ndarray]:
    """A routes file's MoE layers and ids by [token position][MoE layer][slot]; refuses bytes
    that are not one (wrong magic or version, a size that is not the header's)."""
    fixed = struct.calcsize("<8s7I")
    if len(data) < fixed or data[:8] != ROUTES_MAGIC:
        raise ConfigError(f"{where}: not a routes file (no {ROUTES_MAGIC.decode()} header)")
    _, version, _, _, k, n_moe, n_prompt, n_decode = struct.unpack_from("<8s7I", data)
    if version != ROUTES_VERSION:
        raise ConfigError(f"{where}: routes version {version}, this appliance reads {ROUTES_VERSION}")
    if len(data) != fixed + 4 * n_moe + 4 * (n_prompt + n_decode) * n_moe * k:
        raise ConfigError(f"{where}: {len(data)} bytes, not the size its header gives")
    layers = [int(x) for x in np.frombuffer(data, "<u4", n_moe, fixed)]
    ids = np.frombuffer(data, "<i4", offset=fixed + 4 * n_moe).reshape(n_prompt + n_decode, n_moe, k)
    return layers, ids


def follows_routes(trace: Trace, data: bytes, where: str = "routes file") -> bool:
    """Whether every row of `trace` holds exactly the routes' ids for its layer and position (a
    forced run's trace: then a replay of the trace is a replay of the routes)."""
    layers, ids = read_routes(data, where)
    if trace.moe_layers != layers or trace.k != ids.shape[2]:
        return False
    rows = trace.rows
    index = np.searchsorted(np.asarray(layers), rows["layer"])
    pos = rows["pos"].astype(np.int64)
    if len(rows) and int(pos.max()) >= len(ids):
        return False
    return bool(np.array_equal(rows["ids"], ids[pos, index]))
