"""write_sweep_analysis on a run directory laid out as a sweep writes it: a real synthesized
GGUF, route traces whose header matches it, tracer timings with phase reads, a probe record."""

import json
from pathlib import Path
from typing import Any

from appliance.analysis.run_analyses import write_sweep_analysis
from appliance.core import atomic
from appliance.core.digests import sha256_bytes
from appliance.trace.format import write_trace
from appliance.trace.routes import routes_bytes
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.models import tiny_model

MIB = 1 << 20


def _spec(seed: int) -> TraceSynthSpec:
    return TraceSynthSpec(n_layers=4, n_experts=64, k=8, n_decode=48, seed=seed)


def _trial(
    run: Path,
    name: str,
    limit: int,
    decode_read: int,
    seed: int,
    cgroup_extra: int = 0,
    routes: dict[str, str] | None = None,
    traced: bool = True,
) -> None:
    directory = run / "trials" / name
    directory.mkdir(parents=True)
    if traced:
        trace = synth_trace(_spec(seed))
        write_trace(directory / "trace.moetrace", trace.header, trace.rows)
    forced = {} if routes is None else {"routes": routes}
    atomic.write_json(
        directory / "trial.json",
        {
            "index": int(name[:3]),
            "variant": "demand-mmap",
            "repeat": 1,
            "memory_limit": limit,
            "status": "ok",
            "model_device": "254:0",
            **forced,
        },
    )
    atomic.write_json(
        directory / "cgroup.json", {"block_read_bytes": {"254:0": 3 * MIB + decode_read + cgroup_extra}}
    )
    io = {
        "load_end": {"read_bytes": MIB, "majflt": 1},
        "prefill_end": {"read_bytes": 3 * MIB, "majflt": 5},
        "decode_end": {"read_bytes": 3 * MIB + decode_read, "majflt": 50},
    }
    atomic.write_json(
        directory / "timing.json",
        {
            "n_decode_tokens": 48,
            "decode_s": 2.0,
            "decode_tokens_per_s": 24.0,
            "residency_after_load": {"anon_bytes": 2 * MIB},
            "residency_at_end": {"anon_bytes": 3 * MIB},
            "io": io,
        },
    )


def _probe(run: Path) -> dict[str, Any]:
    record = {
        "probe": "disk",
        "file_bytes": 1,
        "advice": "POSIX_FADV_RANDOM",
        "measurements": [
            {
                "block_bytes": 126976,
                "queue_depth": d,
                "reads": 8,
                "bytes": 8 * 126976,
                "device_read_bytes": 8 * 126976,
                "seconds": 0.01 / d,
            }
            for d in (1, 8)
        ]
        + [
            {
                "block_bytes": 4096,
                "queue_depth": d,
                "reads": 8,
                "bytes": 32768,
                "device_read_bytes": 32768,
                "seconds": 0.001,
            }
            for d in (1, 8)
        ],
    }
    directory = run / "probe" / "000-64MiB-disk-probe-r1"
    directory.mkdir(parents=True)
    atomic.write_json(directory / "timing.json", record)
    return record


def test_the_analysis_lands_in_results_json_with_three_plots(tmp_path: Path) -> None:
    model = tiny_model("qwen3moe", size="32MiB")
    run = tmp_path / "run"
    _trial(run, "001-12MiB-demand-mmap-r1", 12 * MIB, 20 * MIB, 1)
    _trial(run, "002-64MiB-demand-mmap-r1", 64 * MIB, 1 * MIB, 1)
    _probe(run)
    atomic.write_json(run / "results.json", {"schema_version": 1})
    sweep = write_sweep_analysis(run, model)

    results = json.loads((run / "results.json").read_text())
    assert results["schema_version"] == 1 and results["sweep"] == sweep
    assert sweep["limits"] == [12 * MIB, 64 * MIB]
    assert sweep["probe"]["expert_qd1_bytes_per_s"] == 8 * 126976 / 0.01
    assert sweep["phase_sums_within_tolerance"] is True
    assert list(sweep) == [
        "model",
        "probe",
        "limits",
        "policies",
        "phase_tolerance",
        "phase_sums_within_tolerance",
        "trials",
        "not_comparable",
        "summary",
    ]
    assert (sweep["model"]["n_experts"], sweep["model"]["k"]) == (64, 8)
    assert sweep["policies"] == ["lru", "fifo", "least-stale", "belady"]
    assert sweep["phase_tolerance"] == 0.10
    # 20 MiB of decode reads is below what Belady must re-read at the small limit's capacity:
    # flagged, left out of the summary and of the roofline (tests/unit/analysis/test_contamination.py)
    assert sweep["not_comparable"] == ["001-12MiB-demand-mmap-r1"]
    assert [s["memory_limit"] for s in sweep["summary"]] == [64 * MIB]
    small, large = sweep["trials"]
    assert "roofline" not in small and "roofline_page" not in small
    page_bps = 32768 / 0.001  # the 4 KiB reads at depth 1
    assert large["roofline"]["reference_limit"] == large["roofline_page"]["reference_limit"] == 64 * MIB
    assert large["roofline_page"]["compute_s_per_token"] == (2.0 - MIB / page_bps) / 48
    assert large["roofline"]["compute_s_per_token"] == (2.0 - MIB / (8 * 126976 / 0.01)) / 48
    small, large = sweep["trials"]
    assert small["anon_bytes"] == 3 * MIB
    assert small["capacity_experts"] < large["capacity_experts"]
    assert small["measured_decode_read_bytes"] == 20 * MIB
    assert small["disk_fraction"] == (20 * MIB / 2.0) / (8 * 126976 / 0.01)
    lru = small["predicted"]["policies"]["lru"]["decode_read_bytes"]
    assert small["measured_over_lru"] == 20 * MIB / lru
    for name in ("sweep_decode_tps.png", "sweep_reads_per_token.png", "sweep_disk_fraction.png"):
        assert (run / "plots" / name).read_bytes().startswith(b"\x89PNG")


def test_a_model_that_is_not_the_traced_one_is_an_error_not_a_crash(tmp_path: Path) -> None:
    other = tiny_model("qwen3moe", size="32MiB", experts=32)
    run = tmp_path / "run"
    _trial(run, "001-12MiB-demand-mmap-r1", 12 * MIB, MIB, 1)
    atomic.write_json(run / "results.json", {"schema_version": 1})
    sweep = write_sweep_analysis(run, other)
    assert "expert count is 32 in the GGUF but 64 in the trace header" in sweep["error"]
    assert not (run / "plots").exists()


def test_without_a_probe_there_is_no_roofline(tmp_path: Path) -> None:
    """No probe record: no bandwidth, so no roofline and no disk fraction; a phase sum 20% off
    the cgroup's count fails the tolerance."""
    model = tiny_model("qwen3moe", size="32MiB")
    run = tmp_path / "run"
    _trial(run, "001-64MiB-demand-mmap-r1", 64 * MIB, 1 * MIB, 1, cgroup_extra=MIB)  # 4 MiB of 5
    atomic.write_json(run / "results.json", {"schema_version": 1})
    sweep = write_sweep_analysis(run, model)
    assert sweep["probe"] is None
    (trial,) = sweep["trials"]
    assert "roofline" not in trial and "roofline_page" not in trial and trial["disk_fraction"] is None
    assert trial["phase_sum_over_cgroup"] == 4 / 5
    assert sweep["phase_sums_within_tolerance"] is False


def test_each_forced_trial_is_checked_against_the_routes_file_beside_the_model(tmp_path: Path) -> None:
    """True when its trace holds exactly the routes; False when it does not; None without a
    trace or when the routes file is gone or is not the one the trial recorded; no key for a
    trial that was not forced."""
    model = tmp_path / "models" / "model.gguf"
    model.parent.mkdir()
    model.symlink_to(tiny_model("qwen3moe", size="32MiB"))
    data = routes_bytes(synth_trace(_spec(1)))
    (model.parent / "r.routes").write_bytes(data)
    used = {"file": "r.routes", "sha256": sha256_bytes(data)}
    run = tmp_path / "run"
    forced = [
        (1, used, True),
        (2, used, False),  # another trace
        (1, {**used, "sha256": "0" * 64}, None),  # the file beside the model is not the one used
        (1, {**used, "file": "gone.routes"}, None),
    ]
    for index, (seed, routes, _) in enumerate(forced, 1):
        _trial(run, f"{index:03d}-64MiB-demand-mmap-r{index}", 64 * MIB, MIB, seed, routes=routes)
    _trial(run, "005-64MiB-demand-mmap-r5", 64 * MIB, MIB, 1, routes=used, traced=False)
    _trial(run, "006-64MiB-demand-mmap-r6", 64 * MIB, MIB, 1)  # not forced
    atomic.write_json(run / "results.json", {"schema_version": 1})
    trials = write_sweep_analysis(run, model)["trials"]
    assert [t.get("trace_equals_routes", "absent") for t in trials] == [
        *(expected for _, _, expected in forced),
        None,
        "absent",
    ]


def test_a_routes_file_that_is_not_one_makes_the_analysis_an_error_naming_it(tmp_path: Path) -> None:
    model = tmp_path / "models" / "model.gguf"
    model.parent.mkdir()
    model.symlink_to(tiny_model("qwen3moe", size="32MiB"))
    garbage = b"not routes at all"
    (model.parent / "r.routes").write_bytes(garbage)
    run = tmp_path / "run"
    routes = {"file": "r.routes", "sha256": sha256_bytes(garbage)}  # the file the trial recorded
    _trial(run, "001-64MiB-demand-mmap-r1", 64 * MIB, MIB, 1, routes=routes)
    atomic.write_json(run / "results.json", {"schema_version": 1})
    assert write_sweep_analysis(run, model) == {
        "error": f"{model.parent / 'r.routes'}: not a routes file (no MOEROUTE header)"
    }
