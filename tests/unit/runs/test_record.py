"""What run.json, trial.json, the console and trial_resources.png record of a run's limits
and trial names: a sweep's own limits, never the profile's."""

from appliance.runs.execute import _trial_line
from appliance.runs.memory_points import SweepLimit
from appliance.runs.plan import sweep_plan, trial_plan
from appliance.runs.profile import load_profile
from appliance.runs.record import limits_record
from appliance.runs.trial import base_record

MIB = 1 << 20
# the demo's limits: 0.25, 0.5 and 1.2 times the 400 MiB model file
SWEEP = [SweepLimit(104_333_312, "0.25"), SweepLimit(208_670_720, "0.5"), SweepLimit(500_805_632, "1.2")]


def test_a_sweeps_run_record_lists_every_limit_its_trials_ran_under() -> None:
    profile = load_profile("tiny-oversub")
    limits = limits_record(profile, sweep_plan(profile, SWEEP, repeats=2)).to_json()
    assert limits == {
        "memory_bytes": None,
        "memswap_bytes": None,
        "trials": [
            {"memory_bytes": limit.bytes, "memswap_bytes": limit.bytes, "point": limit.point}
            for limit in SWEEP
        ],
    }
    assert profile.limits.memory == 200 * MIB  # the profile's limit, which no sweep trial used


def test_a_plain_runs_record_names_the_profiles_limit() -> None:
    profile = load_profile("tiny-oversub")
    assert limits_record(profile, trial_plan(profile, 1)).to_json() == {
        "memory_bytes": 200 * MIB,
        "memswap_bytes": 200 * MIB,
        "trials": [{"memory_bytes": 200 * MIB, "memswap_bytes": 200 * MIB}],
    }


def test_the_console_names_each_trial_as_its_directory() -> None:
    profile = load_profile("tiny-oversub")
    trial = sweep_plan(profile, SWEEP, repeats=1)[0]
    record = {**base_record(trial, profile), "status": "ok", "exit_code": 0, "engine_wall_s": 1.5}
    assert record["name"] == trial.name == "001-99.5MiB-baseline-r1"
    assert record["memory_limit"] == SWEEP[0].bytes
    assert _trial_line(record).startswith("  trial 001-99.5MiB-baseline-r1: [green]ok[/green] exit 0")


def test_a_failed_trials_line_says_why() -> None:
    record = {"name": "001-x", "status": "failed", "exit_code": None, "error": "the device [server] died"}
    line = _trial_line(record)
    assert line == "  trial 001-x: [red]failed[/red] exit None, the device \\[server] died"
