"""The analyses a run kind writes into its run directory before the seal (the `analyze` hook
of the one chain, `appliance.workflows.run.run_prepared`): analysis/paging.json for a cold,
traced run (measured reads against an LRU replay of each trial's own trace), and for a sweep
results.json's `sweep` with the sweep's plots. numba and matplotlib load only when one runs.
"""

from pathlib import Path
from typing import Any

from appliance.analysis.stats import trial_metrics
from appliance.core import atomic
from appliance.core.errors import ApplianceError
from appliance.core.strict_load import load_json
from appliance.runs.profile import Profile
from appliance.runs.run_dir import RunDir


def paging_rows(run_dir: Path, model_path: Path, memory_limit: int, n_predict: int) -> list[dict[str, Any]]:
    """Per trial with a trace and a block-read count: bytes read against the LRU prediction."""
    from appliance.analysis.capacity import anon_bytes
    from appliance.analysis.paging import (  # numba loads only for this analysis
        predicted_cold_read,
        run_trial_contamination,
    )

    rows = []
    layout = RunDir(run_dir)
    for trial in layout.load_trials():
        trace = layout.trial(trial["dir"]).trace
        measured = trial_metrics(trial, n_predict)["block_read_bytes"]
        if not trace.exists() or not measured:
            continue
        prediction = predicted_cold_read(trace, model_path, memory_limit, anon_bytes(trial))
        rows.append(
            {
                "trial": trial["dir"],
                "variant": trial["variant"],
                "measured_read_bytes": int(measured),
                **prediction,
                "ratio": measured / prediction["predicted_read_bytes"],
                "contamination": run_trial_contamination(trial, trace, model_path),
            }
        )
    return rows


def write_paging_analysis(run_dir: Path, model_path: Path, profile: Profile) -> None:
    """analysis/paging.json, inside the bundle: measured reads against the LRU prediction."""
    if not profile.trace or not profile.schedule.cold_cache:
        return
    try:
        rows: Any = paging_rows(run_dir, model_path, profile.limits.memory, profile.schedule.n_predict)
    except ApplianceError as exc:  # an analysis that cannot run must not block the seal
        rows = {"error": str(exc)}
    atomic.write_json(RunDir(run_dir).paging_analysis, {"lru_prediction": rows})


def read_paging_analysis(run_dir: Path) -> list[dict[str, Any]]:
    path = RunDir(run_dir).paging_analysis
    if not path.exists():
        return []
    record = load_json(path)
    rows = record.get("lru_prediction") if isinstance(record, dict) else None
    return rows if isinstance(rows, list) else []


def write_sweep_analysis(run_dir: Path, model_path: Path) -> dict[str, Any]:
    """results.json gains `sweep` (with `expert_cache` when trials ran the engine's expert
    cache); plots/ gains the sweep's three pictures."""
    from appliance.analysis.cache_analysis import sweep_cache_analysis
    from appliance.analysis.sweep_analysis import analyze_sweep  # numba loads only for analysis
    from appliance.analysis.sweep_plots import write_sweep_plots  # and matplotlib

    layout = RunDir(run_dir)
    try:
        trials, traces, probe = layout.load_trials(), layout.traces(), layout.read_probe()
        sweep = analyze_sweep(trials, traces, model_path, probe)
        cache = sweep_cache_analysis(trials, traces, model_path, probe) if "error" not in sweep else None
        if cache is not None:  # the engine's expert cache ran (docs/sweeps.md)
            sweep["expert_cache"] = cache
    except ApplianceError as exc:  # an analysis that cannot run must not block the seal
        sweep = {"error": str(exc)}
    results = layout.read_results()
    results["sweep"] = sweep
    atomic.write_json(layout.results_file, results)
    if "error" not in sweep:
        write_sweep_plots(sweep, layout.plots)
    return sweep
