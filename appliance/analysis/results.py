"""A run's results after its trials: results.json (statistics) and its plots."""

from pathlib import Path
from typing import Any

from appliance.analysis import stats
from appliance.analysis.placement import placement_summary
from appliance.core import atomic
from appliance.core.errors import ApplianceError
from appliance.planner.accounting import Accounting, account_file
from appliance.runs.profile import Profile
from appliance.runs.run_dir import RunDir


def analyze_run(
    run_dir: Path, profile: Profile, model_path: Path | None = None
) -> tuple[dict[str, Any], list[Path]]:
    """Writes RUN/results.json and RUN/plots/*.png from the trials recorded so far; returns
    the results and the plots written. The runner calls it for complete and incomplete runs.
    With the model's path, results.json `placement` sets the planner's prediction beside the
    placement each trial's engine recorded (appliance.analysis.placement)."""
    results = stats.summarize(run_dir, [v.name for v in profile.variants], profile.schedule.n_predict)
    results["placement"] = run_placement(run_dir, profile, model_path)
    atomic.write_json(RunDir(run_dir).results_file, results)
    from appliance.analysis import plots  # matplotlib loads only when a run has plots to draw

    return results, plots.write_plots(run_dir, results, profile.limits.memory)


def run_placement(run_dir: Path, profile: Profile, model_path: Path | None) -> dict[str, Any]:
    """results.json `placement`; without a readable model header only the engine's side."""
    accounting: Accounting | None = None
    if model_path is not None:
        try:
            accounting = account_file(model_path)
        except ApplianceError:  # an analysis that cannot run must not block the seal
            accounting = None
    layout = RunDir(run_dir)
    return placement_summary(
        layout.load_trials(),
        accounting,
        lambda t: t.get("memory_limit") or profile.limits.memory,
        profile.limits.vram,
        layout.traces(),
    )
