"""`make bench-replay`: replay speed and memory against libCacheSim on the same requests, one core.

A synthetic trace (default 40 MoE layers, 256 experts, 8 per token, 100,000 tokens) is
flattened into single-expert requests over one global pool; our engine and libCacheSim's
`process_trace` replay exactly those requests at the same capacity. Printed: requests per
second for each policy, ours / libCacheSim as a ratio, and whether the miss counts agree;
for every policy both have, the goal (at least twice libCacheSim's rate) met or not. Then
memory: the trace written as a `.moetrace` file and replayed as `appliance trace replay`
does, once per shared policy in a fresh process (`bench.replay_memory`), its peak resident
set over the process's own baseline against the file's size (goal: at most twice). Last, an
LRU curve from one Mattson pass against separate libCacheSim runs.
Our times include everything the engine needs (Belady's next-use pass included); the
libCacheSim times cover `process_trace` on a prepared oracleGeneral trace.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from appliance.trace import kernels
from appliance.trace.events import EventStream, single_item_stream, trace_events
from appliance.trace.format import write_trace
from appliance.trace.replay import pool_hits
from appliance.trace.synth import TraceSynthSpec, synth_trace
from bench.lcs_oracle import LCS_POLICIES, lcs_misses, make_cache, open_reader, write_oracle_trace


def our_run(stream: EventStream, policy: str, capacity: int) -> tuple[int, float]:
    """(misses, seconds) for one replay, next-use preparation included."""
    code = kernels.CODES[policy]
    start = time.perf_counter()
    counts = (
        np.bincount(stream.items, minlength=stream.n_objects).astype(np.float64)
        if code == kernels.STATIC_HOT
        else np.zeros(stream.n_objects)
    )
    flags = pool_hits(stream, code, capacity, counts, None)
    seconds = time.perf_counter() - start
    return int(len(flags) - flags.sum()), seconds


SPEED_GOAL = 2.0  # ours / libCacheSim, requests per second, every shared policy
MEMORY_GOAL = 2.0  # peak memory of a replay over the trace file's size


def memory_run(path: Path, policy: str, capacity: int) -> dict[str, int]:
    """`bench.replay_memory`'s figures for one replay of the file, in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-m", "bench.replay_memory", str(path), policy, str(capacity)],
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, int] = json.loads(result.stdout)
    return figures


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def lcs_run(reader, policy: str, capacity: int, n: int) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    misses = lcs_misses(reader, policy, capacity, n)
    return misses, time.perf_counter() - start


def warm_up() -> None:
    kernels.compile_kernels()  # small inputs would otherwise run as plain Python
    small = trace_events(synth_trace(TraceSynthSpec(n_decode=8))).stream
    for policy in kernels.POLICIES:
        our_run(single_item_stream(small), policy, 8)
    kernels.lru_depths(small.ptr, small.items, small.n_objects)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--capacity-fraction", type=float, default=0.25)
    parser.add_argument("--curve-points", type=int, default=10)
    args = parser.parse_args()

    warm_up()
    prompt = min(512, args.tokens // 2)
    spec = TraceSynthSpec(
        n_layers=args.layers,
        n_experts=args.experts,
        k=args.k,
        n_prompt=prompt,
        n_ubatch=128,
        n_decode=args.tokens - prompt,
        skew=1.0,
        correlation=0.3,
        seed=2026,
    )
    trace = synth_trace(spec)
    events = trace_events(trace)
    flat = single_item_stream(events.stream)
    n = flat.n_requests
    capacity = int(flat.n_objects * args.capacity_fraction)
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} "
        f"{os.cpu_count()} logical CPUs, python {platform.python_version()}; "
        "one core (numba and libCacheSim single-threaded)"
    )
    print(
        f"trace: {args.layers} layers x {args.experts} experts, k={args.k}, "
        f"{args.tokens} tokens -> {n} requests ({events.stream.n_events} MoE events), "
        f"global pool of {flat.n_objects} objects, capacity {capacity}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        reader = open_reader(write_oracle_trace(Path(tmp) / "flat.oracleGeneral", flat.items))
        print()
        print(
            f"{'policy':<12} {'ours req/s':>12} {'libCacheSim req/s':>18} {'ratio':>7} "
            f"{'misses':>10} {'equal':>6}  goal >= {SPEED_GOAL:g}x"
        )
        for policy in kernels.POLICIES:
            ours_misses, ours_s = our_run(flat, policy, capacity)
            if policy in LCS_POLICIES:
                lcs_m, lcs_s = lcs_run(reader, policy, capacity, n)
                print(
                    f"{policy:<12} {n / ours_s:>12,.0f} {n / lcs_s:>18,.0f} "
                    f"{lcs_s / ours_s:>6.2f}x {ours_misses:>10} "
                    f"{'yes' if lcs_m == ours_misses else 'NO':>6}  {_met(lcs_s / ours_s >= SPEED_GOAL)}"
                )
            else:
                print(f"{policy:<12} {n / ours_s:>12,.0f} {'-':>18} {'-':>7} {ours_misses:>10} {'-':>6}")
        path = write_trace(Path(tmp) / "bench.moetrace", trace.header, trace.rows)
        size = path.stat().st_size
        print()
        print(
            f"memory: {size:,} byte trace file, `trace replay --scope global --capacity {capacity}`, "
            f"a fresh process per policy"
        )
        print(
            f"{'policy':<12} {'baseline MiB':>12} {'peak MiB':>9} {'replay MiB':>11} "
            f"{'replay/file':>12} {'peak/file':>10}  goal replay/file <= {MEMORY_GOAL:g}"
        )
        for policy in LCS_POLICIES:
            fig = memory_run(path, policy, capacity)
            over = fig["replay_bytes"] / size
            print(
                f"{policy:<12} {fig['baseline_bytes'] / 2**20:>12.0f} {fig['peak_bytes'] / 2**20:>9.0f} "
                f"{fig['replay_bytes'] / 2**20:>11.0f} {over:>11.2f}x "
                f"{fig['peak_bytes'] / size:>9.2f}x  {_met(over <= MEMORY_GOAL)}"
            )
        pools = events.pools("per-layer")
        atomic_start = time.perf_counter()
        for pool in pools:
            pool_hits(pool, kernels.LRU, args.experts // 4, None, None)
        atomic_s = time.perf_counter() - atomic_start
        print(
            f"(MoE atomic events, per-layer LRU at {args.experts // 4}: "
            f"{events.stream.n_requests / atomic_s:,.0f} req/s)"
        )

        caps = np.unique(np.linspace(1, flat.n_objects, args.curve_points).round().astype(np.int64)).tolist()
        start = time.perf_counter()
        depths = kernels.lru_depths(flat.ptr, flat.items, flat.n_objects)
        hist = np.bincount(depths, minlength=flat.n_objects + 1)
        hist[0] = 0
        cum = np.cumsum(hist)
        ours_curve = [int(n - cum[c]) for c in caps]
        ours_s = time.perf_counter() - start
        start = time.perf_counter()
        lcs_curve = []
        for c in caps:
            cache = make_cache("lru", c)
            ratio, _ = cache.process_trace(reader)
            lcs_curve.append(int(round(ratio * n)))
        lcs_s = time.perf_counter() - start
    print()
    print(
        f"LRU curve, {len(caps)} capacities: ours one pass {ours_s:.2f} s, libCacheSim "
        f"{len(caps)} runs {lcs_s:.2f} s, ratio {lcs_s / ours_s:.1f}x, miss counts equal: "
        f"{'yes' if ours_curve == lcs_curve else 'NO'}"
    )


if __name__ == "__main__":
    main()
