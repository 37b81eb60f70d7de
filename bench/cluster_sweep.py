"""`make bench-cluster`: the miniature sweep's wall time through `--cluster` on one node and on
two, both Ray nodes on this machine (inside a network namespace with only `lo`).

Both nodes share this machine's cores, disk and page cache, so little speed-up is expected:
this measures what the Ray executor costs and what running trials side by side does, not a
lab's speed-up. Prints one line per cluster size and the ratio.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path

from rich.console import Console

from appliance.core.paths import cache_dir
from appliance.runs.profile import load_profile
from appliance.workflows.run import ensure_synth_model
from tests.ray_cluster import ADDRESS, LoopbackCluster

PROFILE = "tiny-oversub"


def timed_sweep(
    nodes: int, models: Path, out: Path, extra: list[str], image: str | None
) -> tuple[float, dict]:
    cluster = LoopbackCluster()
    images = {"cpu": image} if image else None
    try:
        cluster.start_namespace()
        cluster.join(head=True, images=images)
        for _ in range(nodes - 1):
            cluster.join(images=images)
        started = time.monotonic()
        result = cluster.appliance(
            "sweep",
            PROFILE,
            "--models",
            str(models),
            "--out",
            str(out),
            "--unsigned",
            "--cluster",
            ADDRESS,
            *extra,
            timeout=7200,
        )
        seconds = time.monotonic() - started
        if result.returncode != 0:
            raise SystemExit(
                f"sweep on {nodes} node(s) failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
    finally:
        cluster.stop()
    executor = json.loads((out / "run.json").read_text())["executor"]
    return seconds, executor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", default="1")
    parser.add_argument("--memory", default=None, help="limits (default: the profile's sweep)")
    parser.add_argument(
        "--image", default=None, help="engine image, on the driver and every node (default: the lock's)"
    )
    parser.add_argument("--out", type=Path, required=True, help="directory for the two runs")
    args = parser.parse_args()
    models = cache_dir() / "models" / "demo"
    ensure_synth_model(load_profile(PROFILE), models, Console(file=io.StringIO()))
    extra = ["--repeats", args.repeats]
    extra += ["--memory", args.memory] if args.memory else []
    extra += ["--image", args.image] if args.image else []
    times = {}
    for nodes in (1, 2):
        seconds, executor = timed_sweep(nodes, models, args.out / f"{nodes}-node", extra, args.image)
        used = len(set(executor["trial_nodes"].values()))
        times[nodes] = seconds
        print(
            f"{nodes} node(s): sweep of {PROFILE} (--repeats {args.repeats}) in "
            f"{seconds:.1f} s, {len(executor['trial_nodes'])} trials on {used} node(s)"
        )
    print(f"two nodes / one node: {times[2] / times[1]:.2f}x the wall time")


if __name__ == "__main__":
    main()
