"""Summary of a route trace: model, shape, distinct experts and reuse distances per layer, and
the locality of its decode tokens (`appliance.trace.locality`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from appliance.trace import kernels
from appliance.trace.events import trace_events
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, Trace
from appliance.trace.locality import locality

QUANTILES = (0.5, 0.9, 0.99)


def trace_info(trace: Trace) -> dict[str, Any]:
    """Counts from the header and rows; reuse distance = LRU stack distance within a layer."""
    header = trace.header
    rows = trace.rows
    layers = trace.moe_layers
    first_layer = rows["layer"] == layers[0] if len(rows) else np.zeros(0, dtype=bool)
    kinds = rows["kind"][first_layer]
    events = trace_events(trace)
    per_layer = []
    for j, pool in enumerate(events.pools("per-layer")):
        depths = kernels.lru_depths(pool.ptr, pool.items, pool.n_objects)
        reused = depths[depths > 0]
        quant = np.quantile(reused, QUANTILES).tolist() if len(reused) else [None] * len(QUANTILES)
        per_layer.append(
            {
                "layer": layers[j],
                "requests": int(pool.n_requests),
                "distinct_experts": int(np.count_nonzero(np.bincount(pool.items))),
                "reuse_distance": {
                    f"p{int(q * 100)}": None if v is None else round(float(v), 3)
                    for q, v in zip(QUANTILES, quant, strict=True)
                },
                "first_touches": int((depths == 0).sum()),
            }
        )
    return {
        "arch": header.get("arch"),
        "model_file": header.get("model_file"),
        "model_sha256": header.get("model_sha256"),
        "engine": header.get("engine"),
        "n_layers": header["n_layers"],
        "moe_layers": len(layers),
        "n_experts": trace.n_experts,
        "n_expert_used": trace.k,
        "has_weights": trace.has_weights,
        "rows": int(len(rows)),
        "steps": trace.n_steps,
        "prompt_tokens": int((kinds == KIND_PROMPT).sum()),
        "decode_tokens": int((kinds == KIND_DECODE).sum()),
        "events": events.stream.n_events,
        "requests": events.stream.n_requests,
        "layers": per_layer,
        "locality": locality(trace),
    }
