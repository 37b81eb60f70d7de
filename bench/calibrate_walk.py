"""Fit the full-size synth's walk constants (appliance/models/full_walk.py) to the range of the
real traces, measured on the model's own trace.

`model synth --like INPUT --router walk` writes the model once (--layers, --used, --seed);
each candidate then rewrites only what the constants change, in place (token_embd, output and
the routers: under a tenth of the file), runs llama-moe-trace on it for --decode tokens
(greedy, 2 threads, the prompt below) and scores how far the trace's locality statistics lie
outside the range of the real traces' slices of the model's layer count at that length
(bench.calibrate_synth's distance_outside; at 48 layers the whole traces' range cut to the
length). A seeded random search, then a coordinate descent (bench.calibrate_synth.search).
With --proxy-seeds N the candidates are scored instead on the routes bench.walk_proxy predicts
for model seeds 1 .. N, each from its own start on the walk (seconds a candidate), against the
range narrowed by --margin of its width on each side; the engine then scores the result on
--model-seed as before, and says how far the proxy's statistics lie from the engine's.
Prints the best constants and the statistics each model misses with them; the chosen values
go into full_walk.py by hand (tests/e2e/test_tracer.py then checks a 4-layer slice).

    PYTHONPATH=. python -m bench.calibrate_walk --engine-bin BIN --work DIR --layers 48 --used 6 --trials 0
    PYTHONPATH=. python -m bench.calibrate_walk --proxy-seeds 6 --score-only --decode 64 128

BIN: a local build of the patched engine (`make engine-local`), holding llama-moe-trace. DIR:
a directory on a disk (not tmpfs) with room for the model (18.6 GB at 48 layers). The engine
needs about the model's size in memory: it refuses to start with less available (one at a time).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader

from appliance.host.meminfo import meminfo_bytes
from appliance.models import full_walk
from appliance.models.full_synth import WALK_ROLES, plan_for, role, synthesize_like, tensor_chunks
from appliance.trace.calibration import outside, real_range, statistics
from appliance.trace.format import read_trace
from appliance.trace.locality import decode_trace, locality
from bench import walk_proxy
from bench.calibrate_synth import distance_outside, search

QWEN3 = "evidence/plans/qwen3-30b-a3b-q4_k_m.input.json"
PROMPT = "The quick brown fox jumps over the lazy dog"
SKEW = 1.0
# (low, high) of each constant the search draws from, uniformly
BOUNDS = {
    "POPULARITY_GAIN": (0.25, 1.5),
    "POPULARITY_SHAPE": (-1.0, 1.5),
    "DRIFT_SHARE": (0.1, 0.7),
    "DRIFT_CORRELATION": (0.9, 0.9999),
    "LAYER_GAIN_SPREAD": (0.0, 0.8),
    "REVISIT_SHARE": (0.0, 0.7),
    "REVISIT_MIN_GAP": (2.0, 24.0),
    "REVISIT_TAIL": (0.3, 3.0),
    "ECHO_SHARE": (0.0, 0.4),
}


def set_constants(constants: dict[str, float]) -> None:
    for name, value in constants.items():
        setattr(full_walk, name, value)


def rewrite_walk(model: Path, like: Path, layers: int, used: int, seed: int) -> None:
    """Rewrite the tensors the walk's constants decide (embedding, head, routers) in place."""
    doc, specs, _ = plan_for(like, layers, used)
    cfg = doc["config"]
    walk = full_walk.make_walk(seed, int(cfg["hidden_size"]), int(cfg["vocab_size"]))
    by_name = {spec[0]: spec for spec in specs}
    reader = GGUFReader(model, "r+")
    for tensor in reader.tensors:
        if role(tensor.name) not in (*WALK_ROLES, "router"):
            continue
        chunks = tensor_chunks(seed, SKEW, *by_name[tensor.name], walk)
        data = np.concatenate([np.ascontiguousarray(c).reshape(-1).view(np.uint8) for c in chunks])
        target = np.asarray(tensor.data).reshape(-1).view(np.uint8)
        assert target.size == data.size, tensor.name
        target[:] = data
    del reader  # flushes the memory map


def traced(model: Path, decode: int, engine_bin: Path) -> Any:
    check_room_for(model)
    trace = model.with_suffix(f".{decode}.moetrace")
    command = [str(engine_bin / "llama-moe-trace"), "-m", str(model), "-p", PROMPT, "-n", str(decode)]
    subprocess.run([*command, "--ignore-eos", "-t", "2", "-o", str(trace)], check=True, capture_output=True)
    return read_trace(trace)


def check_room_for(model: Path) -> None:
    """Refuse to start the engine when the host has less memory available than the model's size:
    llama-moe-trace's peak resident set is more than the model (23.6 GB for the 18.6 GB 48-layer
    model, its mapped pages included; two such runs at once on a 23 GiB host were both killed by
    the kernel's OOM killer), so the kernel would end it mid-run."""
    available, size = meminfo_bytes("MemAvailable"), model.stat().st_size
    if available is not None and available < size:
        raise SystemExit(
            f"error: {model} is {size / 2**30:.1f} GiB and only {available / 2**30:.1f} GiB of memory is "
            "available: stop other engines or large jobs (one engine at a time) and rerun"
        )


def walk_start(trace: Any, like: Path, seed: int, layers: int, used: int) -> int:
    """Where on the walk the engine's decode began: the walk token whose first-layer routes
    without residual are those of one of the first decode tokens, less that token's place (the
    token the prompt leaves may lie off the walk; the next one is on it)."""
    bare = walk_proxy.routes(like, seed, SKEW, 1, used, 0, full_walk.WALK_TOKENS, residual=0.0, static=0.0)
    first_layer = bare[0]
    decode = decode_trace(trace)
    chosen = decode.ids[decode.layers == trace.moe_layers[0]]
    for place in range(min(4, len(chosen))):
        wanted = set(chosen[place].tolist())
        matches = [i for i, ids in enumerate(first_layer) if set(ids.tolist()) == wanted]
        if matches:
            return matches[0] - place
    raise SystemExit("no walk token routes like the first decode tokens: is this a walk model?")


def proxy_localities(
    like: Path, seeds: int, layers: int, used: int, decode: list[int]
) -> list[dict[int, Any]]:
    """The proxy's locality statistics for model seeds 1 .. seeds, each from a seeded start on
    the walk, at each decode length."""
    n_experts = int(plan_for(like, layers, used)[0]["config"]["num_experts"])
    out = []
    for seed in range(1, seeds + 1):
        last = full_walk.WALK_TOKENS - max(decode) - 100
        first = int(np.random.default_rng(100 + seed).integers(200, last))
        ids = walk_proxy.routes(like, seed, SKEW, layers, used, first, max(decode))
        out.append({n: locality(walk_proxy.as_trace(ids[:, :n], n_experts)) for n in decode})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-bin", type=Path, help="bin/ of a local engine build (none: the proxy only)")
    parser.add_argument("--work", type=Path, default=Path("."), help="directory for the model (kept)")
    parser.add_argument("--like", type=Path, default=Path(QWEN3), help="skeleton input")
    parser.add_argument("--layers", type=int, default=48, help="the first N layers at full width")
    parser.add_argument("--used", type=int, default=6, help="experts per token")
    parser.add_argument("--model-seed", type=int, default=1)
    parser.add_argument("--decode", type=int, nargs="+", default=[64], help="decode lengths scored")
    parser.add_argument("--trials", type=int, default=8, help="random candidates before the descent")
    parser.add_argument("--seed", type=int, default=1, help="the search's own seed")
    parser.add_argument("--start", type=json.loads, default=None, help="constants (JSON) to start from")
    parser.add_argument("--score-only", action="store_true", help="score --start (or the defaults) and stop")
    parser.add_argument("--proxy-seeds", type=int, default=0, help="search on the proxy over this many seeds")
    parser.add_argument("--margin", type=float, default=0.1, help="range share the proxy keeps off")
    args = parser.parse_args()
    if args.engine_bin is None and not args.proxy_seeds:
        parser.error("give --engine-bin, or --proxy-seeds to score on the proxy alone")
    model = args.work / f"{args.like.stem}.l{args.layers}.k{args.used}.s{args.model_seed}.walk.gguf"
    began = time.perf_counter()
    ranges = {n: real_range(decode_tokens=n, layers=args.layers) for n in args.decode}
    windows = {n: real_range(decode_tokens=n, layers=args.layers, every_window=True) for n in args.decode}

    narrowed = {n: {name: _narrowed(span, args.margin) for name, span in ranges[n].items()} for n in ranges}

    def traces(constants: dict[str, float]) -> dict[int, Any]:
        if not model.exists():
            args.work.mkdir(parents=True, exist_ok=True)
            seed, layers, used = args.model_seed, args.layers, args.used
            synthesize_like(args.like, model, seed=seed, skew=SKEW, layers=layers, used=used)
            print(f"wrote {model}", flush=True)
        set_constants(constants)
        rewrite_walk(model, args.like, args.layers, args.used, args.model_seed)
        return {n: traced(model, n, args.engine_bin) for n in args.decode}

    def score(constants: dict[str, float]) -> float:
        if args.proxy_seeds:
            set_constants(constants)
            per_seed = proxy_localities(args.like, args.proxy_seeds, args.layers, args.used, args.decode)
            total = sum(distance_outside(loc, narrowed[n]) for locs in per_seed for n, loc in locs.items())
            return total / len(per_seed) / len(args.decode)
        got = traces(constants)
        return sum(distance_outside(locality(t), ranges[n]) for n, t in got.items()) / len(args.decode)

    start = args.start or {name: float(getattr(full_walk, name)) for name in BOUNDS}
    best = (0.0, start)
    if not args.score_only:
        best = search(score, BOUNDS, args.trials, np.random.default_rng(args.seed), _rounded, _rounded(start))
        print(f"best {best[1]} score {best[0]:.4f} after {time.perf_counter() - began:.0f} s")
    if args.proxy_seeds:
        set_constants(best[1])
        per_seed = proxy_localities(args.like, args.proxy_seeds, args.layers, args.used, args.decode)
        for seed, locs in enumerate(per_seed, start=1):
            for decode, loc in locs.items():
                names = [m.split(":")[0] for m in outside(loc, ranges[decode])]
                print(
                    f"proxy, model seed {seed}, {decode} tokens: {len(names)} outside {', '.join(names)}"
                    f" ({len(outside(loc, windows[decode]))} outside the range of every window)"
                )
    if args.engine_bin is None:
        return
    for decode, trace in traces(best[1]).items():
        loc = locality(trace)
        misses = outside(loc, ranges[decode])
        in_windows = len(outside(loc, windows[decode]))
        print(
            f"{decode} decode tokens: {len(misses)} outside ({in_windows} outside the range of every window)"
            + "".join(f"\n  {m}" for m in misses)
        )
        first = walk_start(trace, args.like, args.model_seed, args.layers, args.used)
        ids = walk_proxy.routes(args.like, args.model_seed, SKEW, args.layers, args.used, first, decode)
        predicted = statistics(locality(walk_proxy.as_trace(ids, trace.n_experts)))
        measured = statistics(loc).items()
        gaps = {n: max(abs(a - b) for a, b in zip(v, predicted[n], strict=True)) for n, v in measured}
        worst = sorted(gaps.items(), key=lambda item: -item[1])[:3]
        print(f"  the proxy from walk token {first}: " + ", ".join(f"{n} off by {g:.3f}" for n, g in worst))


def _narrowed(span: tuple[float, float], margin: float) -> tuple[float, float]:
    low, high = span
    return low + margin * (high - low), high - margin * (high - low)


def _rounded(constants: dict[str, float]) -> dict[str, float]:
    return {name: round(value, 4) for name, value in constants.items()}


if __name__ == "__main__":
    main()
