"""Fit the tiny synth's router constants (appliance/models/weights.py) to the range of the real
traces, measured on the model's own trace.

Each candidate sets the constants of `BOUNDS`, synthesizes `make demo`'s model (profile
tiny-oversub's `model.synth`, one model per seed of --model-seeds), runs llama-moe-trace on it
with the profile's prompt for --decode tokens (greedy, 2 threads) and scores how far the
trace's locality statistics lie outside the real range (bench.calibrate_synth's
distance_outside: 0 means every statistic inside), the mean over the seeds and lengths; with
--same-shape the range is the like-for-like one, of the real traces' slices of the model's
layer count at each length (appliance.trace.calibration). A seeded random search, then a
coordinate descent from the best point. Prints the best constants and, for
each model seed, the statistics its trace misses; the chosen values go into weights.py by
hand (tests/e2e/test_tracer.py then checks the demo's model against the range).

    PYTHONPATH=. python -m bench.calibrate_router --engine-bin BIN --trials 60 --decode 64 128 --same-shape

BIN: a local build of the patched engine (`make engine-local`), holding llama-moe-trace.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from appliance.models import weights
from appliance.models.shapes import spec_from_synth
from appliance.models.synth import synthesize
from appliance.runs.profile import load_profile
from appliance.trace.calibration import outside
from appliance.trace.format import read_trace
from appliance.trace.locality import locality
from bench.calibrate_synth import distance_outside, ranges_by_length, search

PROFILE = "tiny-oversub"  # make demo's
# (low, high) of each constant the search draws from, uniformly
BOUNDS = {
    "POPULARITY_GAIN": (0.5, 3.0),
    "POPULARITY_EXPONENT": (0.0, 1.0),
    "DRIFT_SHARE": (0.0, 0.9),
    "DRIFT_CORRELATION": (0.8, 0.999),
}


DEMO = load_profile(PROFILE)


def traced_locality(constants: dict[str, float], seed: int, decode: int, engine_bin: Path, work: Path) -> Any:
    """The locality of the demo's model (these constants, this seed) decoding `decode` tokens."""
    for name, value in constants.items():
        setattr(weights, name, value)
    model, trace = work / f"seed{seed}.gguf", work / f"seed{seed}.moetrace"
    assert DEMO.model.synth is not None, f"profile {PROFILE} has no model.synth"
    synthesize(spec_from_synth(DEMO.model.synth | {"seed": seed}), model)
    prompt = DEMO.schedule.prompt
    command = [str(engine_bin / "llama-moe-trace"), "-m", str(model), "-p", prompt, "-n", str(decode)]
    subprocess.run([*command, "--ignore-eos", "-t", "2", "-o", str(trace)], check=True, capture_output=True)
    return locality(read_trace(trace))


def rounded(constants: dict[str, float]) -> dict[str, float]:
    return {name: round(value, 3) for name, value in constants.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-bin", type=Path, required=True, help="bin/ of a local engine build")
    parser.add_argument("--trials", type=int, default=60, help="random candidates before the descent")
    parser.add_argument("--seed", type=int, default=1, help="the search's own seed")
    parser.add_argument(
        "--decode", type=int, nargs="+", default=[64], help="decode lengths (the demo sweep's)"
    )
    parser.add_argument("--same-shape", action="store_true", help="score against the real slices' range")
    parser.add_argument("--model-seeds", type=int, nargs="+", default=[1, 2, 3], help="model seeds scored")
    parser.add_argument("--start", type=json.loads, default=None, help="constants (JSON) to start from")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    layers = int(DEMO.model.synth["layers"]) if DEMO.model.synth else None
    ranges = ranges_by_length(tuple(args.decode), args.same_shape, layers)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="calibrate-router-") as tmp:
        work = Path(tmp)

        def score(constants: dict[str, float]) -> float:
            total = 0.0
            for decode in args.decode:
                for seed in args.model_seeds:
                    loc = traced_locality(constants, seed, decode, args.engine_bin, work)
                    total += distance_outside(loc, ranges[decode])
            return total / (len(args.decode) * len(args.model_seeds))

        start = args.start or {name: float(getattr(weights, name)) for name in BOUNDS}
        best = search(score, BOUNDS, args.trials, rng, rounded, start)
        print(f"best {best[1]} score {best[0]:.4f} after {time.perf_counter() - began:.0f} s")
        for decode in args.decode:
            for seed in args.model_seeds:
                loc = traced_locality(best[1], seed, decode, args.engine_bin, work)
                misses = outside(loc, ranges[decode])
                where = f"model seed {seed}, {decode} decode tokens"
                print(f"{where}: {len(misses)} outside" + "".join(f"\n  {m}" for m in misses))


if __name__ == "__main__":
    main()
