"""A run's results after its trials: results.json (statistics) and its plots."""

from pathlib import Path
from typing import Any

from appliance.analysis import stats
from appliance.core import atomic
from appliance.runs.profile import Profile
from appliance.runs.run_dir import RunDir


def analyze_run(run_dir: Path, profile: Profile) -> tuple[dict[str, Any], list[Path]]:
    """Writes RUN/results.json and RUN/plots/*.png from the trials recorded so far; returns
    the results and the plots written. The runner calls it for complete and incomplete runs."""
    results = stats.summarize(run_dir, [v.name for v in profile.variants], profile.schedule.n_predict)
    atomic.write_json(RunDir(run_dir).results_file, results)
    from appliance.analysis import plots  # matplotlib loads only when a run has plots to draw

    return results, plots.write_plots(run_dir, results, profile.limits.memory)
