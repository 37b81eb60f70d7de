"""Fit `trace synth`'s routing knobs to the range of the real traces (the `--calibrated` preset).

A small seeded random search over the knobs of `BOUNDS`, then a coordinate descent from the
best point. Each candidate synthesizes one trace per shape of
`SHAPES` at each decode length of `DECODE_STEPS` (seed 0, the synth's default; a 45-token
prompt) and is scored by how far its locality statistics (appliance.trace.locality) lie
outside the real range (appliance.trace.calibration.real_range), each distance in units of
the range's width (at least 0.01): 0 means every statistic of every trace is inside. Prints
the best candidate and the statistics it misses; the chosen values go into
`appliance.trace.synth.CALIBRATED` by hand (a test then checks them against the range).

    PYTHONPATH=. python -m bench.calibrate_synth --trials 200 --seed 1 --decode 64
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np

from appliance.trace.calibration import outside, real_range, statistics
from appliance.trace.locality import locality
from appliance.trace.synth import TraceSynthSpec, synth_trace

SHAPES = ((40, 256, 8), (48, 128, 6))  # qwen35-shape-8g's and qwen3-30b-shape's (with its k = 6)
DECODE_STEPS = (64, 128)
PROMPT_TOKENS = 45  # qwen35-shape-8g's prompt
# (low, high) of each knob the search draws from, uniformly
BOUNDS = {
    "skew": (0.5, 2.0),
    "correlation": (0.0, 0.4),
    "recall": (0.0, 1.0),
    "recall_exponent": (0.0, 3.0),
    "recall_window": (8, 128),
    "skew_spread": (0.0, 0.8),
    "recall_tail": (0.0, 0.2),
}


def distance_outside(loc: dict[str, object], ranges: dict[str, tuple[float, float]]) -> float:
    """Sum over statistics of how far each value lies outside its range, in range widths."""
    total = 0.0
    for name, values in statistics(loc).items():
        low, high = ranges[name]
        width = max(high - low, 0.01)
        total += sum(max(low - v, 0.0, v - high) / width for v in values)
    return total


def specs(
    knobs: dict[str, float],
    decode_steps: tuple[int, ...] = DECODE_STEPS,
    shapes: tuple[tuple[int, int, int], ...] = SHAPES,
    seeds: tuple[int, ...] = (0,),
) -> list[TraceSynthSpec]:
    return [
        TraceSynthSpec(
            n_layers=layers,
            n_experts=experts,
            k=k,
            n_prompt=PROMPT_TOKENS,
            n_ubatch=512,
            n_decode=decode,
            seed=seed,
            **knobs,  # type: ignore[arg-type]
        )
        for layers, experts, k in shapes
        for decode in decode_steps
        for seed in seeds
    ]


def score(
    knobs: dict[str, float],
    ranges: dict[int, dict[str, tuple[float, float]]],
    decode_steps: tuple[int, ...],
    shapes: tuple[tuple[int, int, int], ...],
    seeds: tuple[int, ...],
) -> float:
    """The mean over trace seeds of the distances outside, summed over shapes and lengths."""
    traces = specs(knobs, decode_steps, shapes, seeds)
    return sum(distance_outside(locality(synth_trace(spec)), ranges[spec.n_decode]) for spec in traces) / len(
        seeds
    )


def rounded(knobs: dict[str, float]) -> dict[str, float]:
    """Knobs as the preset writes them: 3 decimals, the window a whole number of tokens."""
    out = {name: round(value, 3) for name, value in knobs.items()}
    out["recall_window"] = int(round(knobs["recall_window"]))
    return out


def search(
    score_of: Callable[[dict[str, float]], float],
    bounds: dict[str, tuple[float, float]],
    trials: int,
    rng: np.random.Generator,
    rounded: Callable[[dict[str, float]], dict[str, float]],
    start: dict[str, float] | None = None,
) -> tuple[float, dict[str, float]]:
    """(score, values) of the best candidate: `trials` random ones drawn uniformly from
    `bounds` (after `start`, when given), then a coordinate descent from the best, a step up
    and down each value, halving the steps when neither improves anything, until they are a
    hundredth of the bounds. Prints each improvement."""
    best: tuple[float, dict[str, float]] = (float("inf"), {})
    if start is not None:
        best = (score_of(start), start)
        print(f"start: score {best[0]:.4f} {start}", flush=True)
    for trial in range(trials):
        values = rounded({name: float(rng.uniform(low, high)) for name, (low, high) in bounds.items()})
        got = score_of(values)
        if got < best[0]:
            best = (got, values)
            print(f"trial {trial}: score {got:.4f} {values}", flush=True)
    steps = {name: (high - low) / 8 for name, (low, high) in bounds.items()}
    while best[0] > 0 and any(steps[name] > (high - low) / 100 for name, (low, high) in bounds.items()):
        improved = False
        for name, (low, high) in bounds.items():
            for sign in (1, -1):
                stepped = float(np.clip(best[1][name] + sign * steps[name], low, high))
                values = rounded(best[1] | {name: stepped})
                got = score_of(values)
                if got < best[0]:
                    best, improved = (got, values), True
                    print(f"descent: score {got:.4f} {values}", flush=True)
        if not improved:
            steps = {name: step / 2 for name, step in steps.items()}
    return best


def ranges_by_length(
    lengths: tuple[int, ...], like_for_like: bool, layers: int | None = None
) -> dict[int, dict[str, tuple[float, float]]]:
    """decode length -> the range a trace of that length is scored against: the whole real
    traces', or like for like the real traces cut to that length (and sliced to `layers`)."""
    return {n: real_range(decode_tokens=n, layers=layers) if like_for_like else real_range() for n in lengths}


def parse_shape(text: str) -> tuple[int, int, int]:
    """A shape written LxExK (48x128x6) as (layers, experts, k)."""
    layers, experts, k = (int(x) for x in text.split("x"))
    return layers, experts, k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="random candidates before the descent")
    parser.add_argument("--seed", type=int, default=1, help="the search's own seed")
    parser.add_argument("--decode", type=int, nargs="+", default=list(DECODE_STEPS), help="decode lengths")
    parser.add_argument(
        "--shape", nargs="+", default=["x".join(map(str, shape)) for shape in SHAPES], help="LxExK shapes"
    )
    parser.add_argument(
        "--same-length", action="store_true", help="score against the real traces cut to each decode length"
    )
    parser.add_argument("--trace-seeds", type=int, default=1, help="score the mean over trace seeds 0..N-1")
    parser.add_argument("--check-seeds", type=int, default=20, help="then count the seeds 0..N-1 all inside")
    parser.add_argument(
        "--start", type=json.loads, default=None, help="knobs (JSON) to start the descent from"
    )
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    decode = tuple(args.decode)
    ranges = ranges_by_length(decode, args.same_length)
    shapes = tuple(parse_shape(shape) for shape in args.shape)
    seeds = tuple(range(args.trace_seeds))
    start = time.perf_counter()

    def score_of(knobs: dict[str, float]) -> float:
        return score(knobs, ranges, decode, shapes, seeds)

    best = search(score_of, BOUNDS, args.trials, rng, rounded, args.start)
    print(f"best {best[1]} score {best[0]:.4f} after {time.perf_counter() - start:.0f} s")
    for spec in specs(best[1], decode, shapes):
        misses = outside(locality(synth_trace(spec)), ranges[spec.n_decode])
        shape = f"{spec.n_layers}x{spec.n_experts}x{spec.k}, {spec.n_decode} decode, seed 0"
        print(f"  {shape}: " + ("all inside" if not misses else "; ".join(misses)))
    checked = specs(best[1], decode, shapes, tuple(range(args.check_seeds)))
    inside = [
        spec.seed for spec in checked if not outside(locality(synth_trace(spec)), ranges[spec.n_decode])
    ]
    print(f"  all inside for {len(inside)} of {len(checked)} traces (seeds {inside})")


if __name__ == "__main__":
    main()
