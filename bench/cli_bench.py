"""`make bench-cli`: wall time of the quick verbs against `python -c pass`, in the same run.

Each command runs once to warm the caches (the numba kernel cache among them), then
`--repeats` times; printed: median, min and max seconds, and the median minus the
interpreter's own start. The targets (issue 15): `--help` and `engine show` at most 0.3 s,
`trace info` and `trace replay` on a small trace at most 0.6 s on a second call. On a loaded
machine every figure grows alike: compare with the `python -c pass` row, and note the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_SECONDS = {"--help": 0.3, "engine show": 0.3, "trace info": 0.6, "trace replay": 0.6}


def timed(argv: list[str], repeats: int) -> list[float]:
    subprocess.run(argv, check=True, capture_output=True)  # warm-up: caches, page cache
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    appliance = [sys.executable, "-m", "appliance"]
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "small.moetrace"
        subprocess.run(
            [*appliance, "trace", "synth", str(trace), "--seed", "1"], check=True, capture_output=True
        )
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "--help": [*appliance, "--help"],
            "engine show": [*appliance, "engine", "show"],
            "trace info": [*appliance, "trace", "info", str(trace)],
            "trace replay": [
                *appliance,
                "trace",
                "replay",
                str(trace),
                "--capacity",
                "8",
                "--policy",
                "lru,belady",
            ],
        }
        print(
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
            f"{args.repeats} runs each after one warm-up; seconds"
        )
        print(f"{'command':<16} {'median':>7} {'min':>7} {'max':>7} {'-python':>8} {'target':>7}")
        baseline = None
        for name, argv in commands.items():
            samples = timed(argv, args.repeats)
            median = statistics.median(samples)
            baseline = median if baseline is None else baseline
            target = f"{GOAL_SECONDS[name]:.1f}" if name in GOAL_SECONDS else "-"
            print(
                f"{name:<16} {median:7.3f} {min(samples):7.3f} {max(samples):7.3f} "
                f"{median - baseline:8.3f} {target:>7}"
            )


if __name__ == "__main__":
    main()
