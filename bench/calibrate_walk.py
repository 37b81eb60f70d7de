"""Fit the full-size synth's walk constants (appliance/models/full_walk.py) to the range of the
real traces, measured on the model's own trace.

`model synth --like INPUT --router walk` writes the model once (--layers, --used, --seed);
each candidate then rewrites only what the constants change, in place (token_embd, output and
the routers: under a tenth of the file), runs llama-moe-trace on it for --decode tokens
(greedy, 2 threads, the prompt below) and scores how far the trace's locality statistics lie
outside the range of the real traces' slices of the model's layer count at that length
(bench.calibrate_synth's distance_outside; at 48 layers the whole traces' range cut to the
length). A seeded random search, then a coordinate descent (bench.calibrate_synth.search).
Prints the best constants and the statistics each model misses with them; the chosen values
go into full_walk.py by hand (tests/e2e/test_tracer.py then checks a 4-layer slice).

    PYTHONPATH=. python -m bench.calibrate_walk --engine-bin BIN --work DIR --layers 48 --used 6 --trials 0

BIN: a local build of the patched engine (`make engine-local`), holding llama-moe-trace. DIR:
a directory on a disk (not tmpfs) with room for the model (18.6 GB at 48 layers).
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

from appliance.models import full_walk
from appliance.models.full_synth import WALK_ROLES, plan_for, role, synthesize_like, tensor_chunks
from appliance.trace.calibration import outside, real_range
from appliance.trace.format import read_trace
from appliance.trace.locality import locality
from bench.calibrate_synth import distance_outside, search

QWEN3 = "evidence/plans/qwen3-30b-a3b-q4_k_m.input.json"
PROMPT = "The quick brown fox jumps over the lazy dog"
SKEW = 1.0
# (low, high) of each constant the search draws from, uniformly
BOUNDS = {
    "POPULARITY_GAIN": (1.0, 3.0),
    "POPULARITY_EXPONENT": (0.0, 0.5),
    "DRIFT_SHARE": (0.1, 0.7),
    "DRIFT_CORRELATION": (0.9, 0.9999),
    "LAYER_GAIN_SPREAD": (0.0, 0.8),
    "REVISIT_SHARE": (0.0, 0.7),
    "REVISIT_MIN_GAP": (2.0, 24.0),
    "REVISIT_TAIL": (0.3, 3.0),
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
    trace = model.with_suffix(f".{decode}.moetrace")
    command = [str(engine_bin / "llama-moe-trace"), "-m", str(model), "-p", PROMPT, "-n", str(decode)]
    subprocess.run([*command, "--ignore-eos", "-t", "2", "-o", str(trace)], check=True, capture_output=True)
    return locality(read_trace(trace))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-bin", type=Path, required=True, help="bin/ of a local engine build")
    parser.add_argument("--work", type=Path, required=True, help="directory for the model (kept)")
    parser.add_argument("--like", type=Path, default=Path(QWEN3), help="skeleton input")
    parser.add_argument("--layers", type=int, default=48, help="the first N layers at full width")
    parser.add_argument("--used", type=int, default=6, help="experts per token")
    parser.add_argument("--model-seed", type=int, default=1)
    parser.add_argument("--decode", type=int, nargs="+", default=[64], help="decode lengths scored")
    parser.add_argument("--trials", type=int, default=8, help="random candidates before the descent")
    parser.add_argument("--seed", type=int, default=1, help="the search's own seed")
    parser.add_argument("--start", type=json.loads, default=None, help="constants (JSON) to start from")
    parser.add_argument("--score-only", action="store_true", help="score --start (or the defaults) and stop")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    model = args.work / f"{args.like.stem}.l{args.layers}.k{args.used}.s{args.model_seed}.walk.gguf"
    began = time.perf_counter()
    if not model.exists():
        synthesize_like(args.like, model, seed=args.model_seed, skew=SKEW, layers=args.layers, used=args.used)
        print(f"wrote {model} in {time.perf_counter() - began:.0f} s", flush=True)
    ranges = {n: real_range(decode_tokens=n, layers=args.layers) for n in args.decode}

    def locs(constants: dict[str, float]) -> dict[int, Any]:
        set_constants(constants)
        rewrite_walk(model, args.like, args.layers, args.used, args.model_seed)
        return {n: traced(model, n, args.engine_bin) for n in args.decode}

    def score(constants: dict[str, float]) -> float:
        return sum(distance_outside(loc, ranges[n]) for n, loc in locs(constants).items()) / len(args.decode)

    start = args.start or {name: float(getattr(full_walk, name)) for name in BOUNDS}
    best = (0.0, start)
    if not args.score_only:
        best = search(score, BOUNDS, args.trials, np.random.default_rng(args.seed), _rounded, _rounded(start))
        print(f"best {best[1]} score {best[0]:.4f} after {time.perf_counter() - began:.0f} s")
    for decode, loc in locs(best[1]).items():
        misses = outside(loc, ranges[decode])
        print(f"{decode} decode tokens: {len(misses)} outside" + "".join(f"\n  {m}" for m in misses))


def _rounded(constants: dict[str, float]) -> dict[str, float]:
    return {name: round(value, 4) for name, value in constants.items()}


if __name__ == "__main__":
    main()
