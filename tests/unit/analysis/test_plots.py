"""A run's plots (`appliance.analysis.plots`): trial_resources.png draws each trial's own memory limit."""

from pathlib import Path

from PIL import Image

from appliance.analysis.plots import trial_limits, trial_resources_plot
from appliance.core import atomic
from appliance.runs.run_dir import RunDir
from tests.unit.runs.test_record import MIB, SWEEP


def _trial(run: Path, name: str, limit: int, peak: int) -> None:
    trial = RunDir(run).trial(name)
    atomic.write_json(trial.record_file, {"name": name, "status": "ok", "memory_limit": limit})
    atomic.write_json(trial.cgroup, {"peak_bytes": peak, "block_read_bytes": {"8:0": 3 * MIB}})


def test_trial_resources_draws_each_trials_own_limit(tmp_path: Path) -> None:
    run = tmp_path / "run"
    profile_limit = 200 * MIB
    _trial(run, "001-99.5MiB-baseline-r1", SWEEP[0].bytes, 90 * MIB)
    _trial(run, "002-477.6MiB-baseline-r1", SWEEP[2].bytes, 400 * MIB)
    atomic.write_json(RunDir(run).trial("003-baseline-r1").record_file, {"status": "ok"})  # older record
    trials = RunDir(run).load_trials()
    assert trial_limits(trials, profile_limit) == [SWEEP[0].bytes, SWEEP[2].bytes, profile_limit]
    png = tmp_path / "trial_resources.png"
    assert trial_resources_plot(run, png, profile_limit)
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size[0] >= 600
