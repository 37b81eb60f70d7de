"""`make bench-expert-cache`: the engine's expert cache (patch 0004) at the miniature's scale.

The model, prompt, decode length and limits of the `tiny-oversub` sweep, run by a local build
of llama-moe-trace with 0004 (no engine image: each trial is the tool in a fresh memory cgroup
on this host, v1 or v2, as root), the model evicted from the page cache before every trial.
Per limit and repeat the variants run in order: demand-mmap, demand-prefetch, expert-lru,
expert-least-stale, expert-belady (its --future: the demand-mmap trial's trace of the same limit
and repeat, an identical earlier run). The disk probe runs once first. Prints the per-variant
table and the issue's goals at the smallest limit; writes results.json into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from appliance.analysis import cache_analysis
from appliance.analysis.capacity import model_experts
from appliance.analysis.sweep_analysis import probe_summary
from appliance.core.paths import cache_dir
from appliance.core.units import format_size
from appliance.engine.local_build import build_local
from appliance.engine.lock import load_lock
from appliance.runs.memory_points import resolve_limits
from appliance.runs.profile import load_profile
from appliance.runs.timing import load_timing
from appliance.trace.format import read_trace
from appliance.workflows.run import ensure_synth_model

PROFILE = "tiny-oversub"
CACHE_PATCH = "0004-expert-cache.patch"
DEMAND = {"LLAMA_MMAP_DEMAND": "1"}
VARIANTS: list[tuple[str, list[str]]] = [
    ("demand-mmap", []),
    ("demand-prefetch", ["--prefetch-experts"]),
    ("expert-lru", ["--expert-cache", "lru", "--expert-cache-capacity", "auto"]),
    ("expert-least-stale", ["--expert-cache", "least-stale", "--expert-cache-capacity", "auto"]),
    ("expert-belady", ["--expert-cache", "belady", "--expert-cache-capacity", "auto"]),
]


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_bytes(path: Path) -> int | None:
    """Bytes of `path` in the page cache (util-linux fincore), None without it."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "-o", "RES", str(path)], capture_output=True, text=True
    )
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else None


def in_cgroup(limit: int, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run argv in a fresh memory cgroup limited to `limit` bytes (no swap), then remove it."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    group = Path("/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/memory") / f"appliance-cache-bench-{os.getpid()}"
    group.mkdir()
    try:
        if v2:
            (group / "memory.max").write_text(str(limit))
            (group / "memory.swap.max").write_text("0")
        else:
            (group / "memory.limit_in_bytes").write_text(str(limit))
        wrapped = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group), *argv]
        return subprocess.run(
            wrapped, capture_output=True, text=True, env={**os.environ, **env}, timeout=1800
        )
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def trial_name(limit: int, variant: str, repeat: int) -> str:
    return f"{format_size(limit, trim=True)}-{variant}-r{repeat}".replace(" ", "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--bin", type=Path, help="bin/ of a build with 0004 (default: build it locally)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--limits", default="", help="comma-separated fractions of the model (default: the profile's)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--capacity", default="auto", help="--expert-cache-capacity of the cache variants")
    parser.add_argument(
        "--variants", default="", help="comma-separated subset of the variants (demand-mmap first)"
    )
    parser.add_argument(
        "--models",
        type=Path,
        help="directory for a private copy of the model (default: OUT/models); a copy another "
        "process reads would put its pages back in the page cache between eviction and a trial",
    )
    args = parser.parse_args()
    console = Console(width=160)
    profile = load_profile(PROFILE)
    shared = ensure_synth_model(profile, cache_dir() / "models" / "demo", console)
    model = (args.models or args.out / "models") / shared.name
    if not model.exists():
        model.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared, model)
        with open(model, "rb+") as handle:  # written back, so that eviction can drop its pages
            os.fsync(handle.fileno())
    bin_dir = args.bin or build_local(load_lock(), "b10229", [CACHE_PATCH], console.print)
    tool = str(bin_dir / "llama-moe-trace")
    assert profile.sweep is not None
    points = profile.sweep.memory
    if args.limits:
        from appliance.runs.memory_points import parse_memory_list

        points = parse_memory_list(args.limits)
    resolved = resolve_limits(points, model.stat().st_size, profile.limits.engine_min_memory, profile.name)
    limits = [limit.bytes for limit in resolved]
    n_predict = profile.sweep.n_predict or profile.schedule.n_predict
    args.out.mkdir(parents=True, exist_ok=True)
    base = [tool, "-m", str(model), "-p", profile.schedule.prompt, "-n", str(n_predict), "--ignore-eos"]
    base += ["-t", str(args.threads), "--model-sha256", str(profile.model.sha256), *profile.engine_args]
    load = os.getloadavg()

    # the disk probe (at the expert size) runs once, after the first trial gave the layout
    probe_path = args.out / "probe.json"
    experts = None
    trials: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for limit in limits:
            for variant, extra in VARIANTS:
                if args.variants and variant not in args.variants.split(","):
                    continue
                extra = [args.capacity if arg == "auto" else arg for arg in extra]
                name = trial_name(limit, variant, repeat)
                trial = args.out / name
                trial.mkdir(exist_ok=True)
                reference = args.out / trial_name(limit, "demand-mmap", repeat)
                if variant == "expert-belady":
                    extra = [*extra, "--future", str(reference / "trace.moetrace")]
                argv = [*base, "-o", str(trial / "trace.moetrace"), "--timings", str(trial / "timing.json")]
                argv += ["--text", str(trial / "output.txt"), *extra]
                evict(model)
                resident = resident_bytes(model)
                started = time.monotonic()
                result = in_cgroup(limit, argv, DEMAND)
                wall = time.monotonic() - started
                (trial / "stderr.txt").write_text(result.stderr)
                if result.returncode != 0:
                    console.print(
                        f"[red]{name}: exit {result.returncode}: {result.stderr.strip()[-300:]}[/red]"
                    )
                    continue
                timing = load_timing(trial / "timing.json")
                trace = read_trace(trial / "trace.moetrace")
                if experts is None:
                    experts = model_experts(model, trace)
                    evict(model)
                    probe = subprocess.run(
                        [
                            tool,
                            "--probe-disk",
                            str(model),
                            "--probe-block",
                            str(experts.one_expert),
                            "--timings",
                            str(probe_path),
                        ],
                        capture_output=True,
                        text=True,
                    )
                    if probe.returncode != 0:
                        console.print(f"[red]probe failed: {probe.stderr.strip()}[/red]")
                probe_record = probe_summary(load_timing(probe_path)) if probe_path.is_file() else None
                row = cache_analysis.cache_row(
                    name, variant, repeat, limit, timing, trace, experts, probe_record
                )
                row["trace_identical"] = (trial / "trace.moetrace").read_bytes() == (
                    reference / "trace.moetrace"
                ).read_bytes()
                row["text_identical"] = (trial / "output.txt").read_bytes() == (
                    reference / "output.txt"
                ).read_bytes()
                row["wall_s"] = wall
                row["model_resident_before"] = resident
                rows.append(row)
                trials.append({"name": name, "argv": argv[1:], "wall_s": wall})
                console.print(
                    f"{name:<34} decode {row['decode_tps'] or 0:8.2f} tok/s  reads/token "
                    f"{(row['reads_per_token'] or 0) / 2**20:7.3f} MiB"
                    + (
                        f"  measured/replay {row['measured_over_replay']:.3f}  misses tool/replay "
                        f"{row['tool_decode_misses']}/{row['replayed_decode_misses']}"
                        f"  capacity {row['capacity_experts']}"
                        if "policy" in row and row["measured_over_replay"] is not None
                        else ""
                    )
                )
    cache_analysis.compare_with_baselines(rows)
    summary = cache_analysis.summary(rows)
    goals = cache_analysis.goals(rows)
    probe_record = probe_summary(load_timing(probe_path)) if probe_path.is_file() else None
    results = {
        "profile": PROFILE,
        "model": experts.as_dict() if experts else None,
        "n_predict": n_predict,
        "limits": limits,
        "load_average_at_start": load,
        "load_average_at_end": os.getloadavg(),
        "probe": probe_record,
        "trials": rows,
        "summary": summary,
        "goals": goals,
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    cores = os.cpu_count()
    console.print(f"\nload average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f} ({cores} cores)")
    columns = ("limit", "variant", "tok/s", "MiB/tok", "meas/replay", "vs mmap", "vs prefetch", "qd1", "qd8")
    console.print(" ".join(f"{c:>11}" for c in columns))

    def fmt(v: float | None, spec: str = ".3f") -> str:
        return "-" if v is None else format(v, spec)

    for s in summary:
        cells = [
            format_size(s["memory_limit"], trim=True),
            s["variant"],
            fmt(s["decode_tps"], ".2f"),
            fmt((s["reads_per_token"] or 0) / 2**20),
            *(fmt(s[key]) for key in ("measured_over_replay", "reads_over_demand_mmap")),
            *(
                fmt(s[key])
                for key in ("decode_over_demand_prefetch", "disk_fraction_qd1", "disk_fraction_qd8")
            ),
        ]
        console.print(" ".join(f"{c:>11}" for c in cells))
    console.print_json(json.dumps(goals))
    identical = all(r["trace_identical"] and r["text_identical"] for r in rows)
    console.print(f"traces and texts identical to demand-mmap's: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
