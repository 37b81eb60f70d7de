"""Hit rate against capacity for every policy in one command, with PNG plots and JSON.

LRU curves come from one pass of Mattson stack distances (`kernels.lru_depths`); the other
policies are replayed once per capacity. Belady is drawn as the bound every demand-paged
policy stays under.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from appliance.core.errors import ConfigError
from appliance.trace import kernels
from appliance.trace.events import SCOPES
from appliance.trace.replay import (
    RATE_DIGITS,
    ReplaySetup,
    calibration_counts,
    check_capacity,
    check_policy,
    pool_hits,
)


def default_capacities(setup: ReplaySetup, scope: str, points: int = 16) -> list[int]:
    """Evenly spaced capacities from k to everything-fits for one pool of the scope."""
    top = setup.events.n_experts * (len(setup.events.moe_layers) if scope == "global" else 1)
    grid = np.unique(np.linspace(setup.k, top, points).round().astype(np.int64))
    return [int(c) for c in grid]


def _rate(hits: np.ndarray, requests: np.ndarray) -> list[float | None]:
    return [
        round(float(h) / float(r), RATE_DIGITS) if r else None for h, r in zip(hits, requests, strict=True)
    ]


def policy_layer_hits(setup: ReplaySetup, policy: str, capacities: list[int], scope: str) -> np.ndarray:
    """Hits per (capacity, layer index) for one policy."""
    code = check_policy(policy)
    n_layers = len(setup.events.moe_layers)
    out = np.zeros((len(capacities), n_layers), dtype=np.int64)
    pools = setup.events.pools(scope)
    counts = calibration_counts(setup, scope) if code == kernels.STATIC_HOT else [None] * len(pools)
    for pool, count in zip(pools, counts, strict=True):
        item_layer = pool.item_layer_index()
        if code == kernels.LRU:
            depths = kernels.lru_depths(pool.ptr, pool.items, pool.n_objects).astype(np.int64)
            # hits at capacity C per layer = requests with 1 <= depth <= C
            reused = depths > 0
            order = np.argsort(depths[reused], kind="stable")
            sorted_depths = depths[reused][order]
            sorted_layers = item_layer[reused][order]
            for ci, capacity in enumerate(capacities):
                upto = int(np.searchsorted(sorted_depths, capacity, side="right"))
                out[ci] += np.bincount(sorted_layers[:upto], minlength=n_layers)
            continue
        next_use = (
            kernels.next_use_events(pool.ptr, pool.items, pool.n_objects) if code == kernels.BELADY else None
        )
        for ci, capacity in enumerate(capacities):
            flags = pool_hits(pool, code, capacity, count, next_use)
            out[ci] += np.bincount(item_layer, weights=flags, minlength=n_layers).astype(np.int64)
    return out


def curves_report(
    setup: ReplaySetup, header: dict[str, Any], policies: list[str], capacities: list[int], scope: str
) -> dict[str, Any]:
    """Hit rate per capacity, total and per layer, for every policy (JSON-ready)."""
    if scope not in SCOPES:
        raise ConfigError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    for capacity in capacities:
        check_capacity(capacity, setup.k)
    requests = np.bincount(setup.events.stream.item_layer_index(), minlength=len(setup.events.moe_layers))
    result: dict[str, Any] = {
        "model_file": header.get("model_file"),
        "scope": scope,
        "capacities": list(capacities),
        "layers": setup.events.moe_layers,
        "requests": int(requests.sum()),
        "policies": {},
    }
    for policy in policies:
        hits = policy_layer_hits(setup, policy, capacities, scope)
        total = hits.sum(axis=1)
        result["policies"][policy] = {
            "hits": [int(h) for h in total],
            "hit_rate": _rate(total, np.full(len(capacities), requests.sum())),
            "layer_hit_rate": [
                _rate(hits[:, j], np.full(len(capacities), requests[j]))
                for j in range(len(setup.events.moe_layers))
            ],
        }
    return result


def plot_curves(report: dict[str, Any], out: Path) -> list[Path]:
    """curves.png (every policy, Belady as the bound) and heatmap-<policy>.png per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    caps = report["capacities"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy, data in report["policies"].items():
        if policy == "belady":
            ax.plot(caps, data["hit_rate"], "k--", linewidth=2, label="Belady (bound)")
        else:
            ax.plot(caps, data["hit_rate"], marker=".", label=policy)
    ax.set_xlabel(f"capacity (experts per {'cache' if report['scope'] == 'global' else 'layer'})")
    ax.set_ylabel("hit rate")
    ax.set_ylim(0, 1)
    ax.set_title(f"{report['model_file']}: hit rate vs capacity ({report['scope']})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)
    paths.append(path)
    for policy, data in report["policies"].items():
        grid = np.array([[np.nan if v is None else v for v in row] for row in data["layer_hit_rate"]])
        fig, ax = plt.subplots(figsize=(7, 0.18 * len(report["layers"]) + 2))
        image = ax.imshow(grid, aspect="auto", vmin=0, vmax=1, cmap="viridis", interpolation="nearest")
        ax.set_xticks(range(len(caps)), [str(c) for c in caps], rotation=90, fontsize=7)
        step = max(1, len(report["layers"]) // 20)
        ax.set_yticks(
            range(0, len(report["layers"]), step), [str(x) for x in report["layers"][::step]], fontsize=7
        )
        ax.set_xlabel("capacity")
        ax.set_ylabel("MoE layer")
        ax.set_title(f"{policy}: hit rate per layer ({report['scope']})")
        fig.colorbar(image, ax=ax, label="hit rate")
        fig.tight_layout()
        path = out / f"heatmap-{policy}.png"
        fig.savefig(path, dpi=120, metadata={"Software": None})
        plt.close(fig)
        paths.append(path)
    return paths
