"""The range of real routing: each locality statistic's least and greatest value over the
public traces of real models the repository carries (`tests/fixtures/real-routes/`, listed in
appliance/core/vendored.py), and which statistics of a trace fall outside it.

The synthetic routers are calibrated against this range (docs/trace-format.md, "Synthetic
routing against real routing"); it is computed from the traces every time, never typed in.
A statistic is one number, except next-token reuse per layer, whose range spans every layer of
every real trace and which a trace meets when each of its layers lies inside.

The range is over the whole real traces (128, 128 and 64 decode tokens). Several statistics
depend on a trace's length (pairs touched, the reuse distances of 17 tokens and more, first
touches, the hit rates), so `real_range(decode_tokens=N)` also gives the range of the real
traces cut to their first N decode tokens, a like-for-like view for a trace of N: shown beside
the whole range (`trace calibration --same-length`), never in its place.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from appliance.core.errors import ConfigError
from appliance.core.paths import repo_root
from appliance.core.vendored import VENDORED
from appliance.trace.format import Trace
from appliance.trace.interchange import import_trace
from appliance.trace.locality import decode_trace, locality

PER_LAYER_REUSE = "next-token reuse per layer"


def statistics(loc: dict[str, Any]) -> dict[str, list[float]]:
    """A locality (appliance.trace.locality.locality) as statistic -> its values."""
    out: dict[str, list[float]] = {
        "pairs touched": [loc["pairs_touched"]],
        "hottest / uniform": [loc["hottest_over_uniform"]],
        "next-token reuse": [loc["next_token_reuse"]["overall"]],
        PER_LAYER_REUSE: [r["reuse"] for r in loc["next_token_reuse"]["per_layer"]],
    }
    for bucket in loc["reuse_distance"]:
        out[f"reuse distance {bucket['distance']}"] = [bucket["share"]]
    for row in loc["hit_rates"]:
        for policy in ("lru", "belady"):
            out[f"{policy} hits at {round(100 * row['share'])}%"] = [row[policy]]
    return {name: [v for v in values if v is not None] for name, values in out.items()}


def real_traces() -> list[tuple[str, Trace]]:
    """(file name, trace) of each vendored route_trace CSV, imported as `trace import` does."""
    out = []
    for entry in VENDORED:
        if entry.path.endswith(".route.csv"):
            path = repo_root() / entry.path
            if not path.is_file():
                raise ConfigError(
                    f"{path}: no such file; the real range needs the repository's real traces "
                    "(run from a checkout, or set APPLIANCE_ROOT to one)"
                )
            out.append((path.name, import_trace(path, "route-trace-csv", None, None)))
    return out


def statistic_ranges(locs: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """statistic -> (least, greatest) over the localities' values."""
    merged: dict[str, list[float]] = {}
    for loc in locs:
        for name, values in statistics(loc).items():
            merged.setdefault(name, []).extend(values)
    return {name: (min(values), max(values)) for name, values in merged.items() if values}


def first_decode_tokens(trace: Trace, n: int) -> Trace:
    """The trace's first `n` decode tokens, as a decode-only trace (whole if it has fewer)."""
    decode = decode_trace(trace)
    kept = np.unique(decode.steps)[:n]
    return Trace(header=decode.header, rows=decode.rows[np.isin(decode.steps, kept)])


def real_range(decode_tokens: int | None = None) -> dict[str, tuple[float, float]]:
    """Each statistic's range over the real traces, whole or cut to their first `decode_tokens`."""
    traces = [trace for _, trace in real_traces()]
    if decode_tokens is not None:
        traces = [first_decode_tokens(trace, decode_tokens) for trace in traces]
    return statistic_ranges([locality(trace) for trace in traces])


def outside(loc: dict[str, Any], ranges: dict[str, tuple[float, float]]) -> list[str]:
    """One line per statistic of `loc` with a value outside its range (empty: all inside)."""
    lines = []
    for name, values in statistics(loc).items():
        low, high = ranges[name]
        bad = [v for v in values if not low <= v <= high]
        if bad:
            shown = ", ".join(f"{v:g}" for v in bad)
            lines.append(f"{name}: {shown} outside the real range {low:g} .. {high:g}")
    return lines


# What the demo's model (128 experts, k = 4, 4 layers, 64 decode tokens) cannot meet, and why:
# these ranges are narrower than the spread of the statistic between seeds of the same router
# (3-4: 0.4 points wide), or depend on the trace's length (the real traces decode 128 tokens:
# distances of 17-64 tokens are rarer in 64) or on how many tokens a pair sees (hit rates at
# a share of the pairs). docs/trace-format.md lists the measured values.
TINY_OUTSIDE = frozenset(
    {
        "reuse distance 2",
        "reuse distance 3-4",
        "reuse distance 17-32",
        "reuse distance 33-64",
        "belady hits at 10%",
        "lru hits at 25%",
    }
)


def named(lines: list[str]) -> set[str]:
    """The statistics that `outside` lines name."""
    return {line.split(":", 1)[0] for line in lines}


def outside_names(loc: dict[str, Any], ranges: dict[str, tuple[float, float]]) -> set[str]:
    """The statistics of `loc` with a value outside `ranges`."""
    return named(outside(loc, ranges))
