"""The record of a trial the cluster did not run to its end: one constructor (`not_run`) for
the given-up and the interrupted trial, written where the trial's directory would be."""

import json
from pathlib import Path

from appliance.cluster.executor import RayExecutor, not_run
from appliance.runs.plan import trial_plan
from appliance.runs.profile import load_profile
from appliance.runs.records import Attempt, TrialRecord

ATTEMPT = Attempt("node-a", "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", error="node lost: gone")


def test_a_trial_given_up_is_failed_and_unscheduled() -> None:
    profile = load_profile("tiny-oversub")
    trial = trial_plan(profile, 1)[0]
    record = not_run(trial, profile, [ATTEMPT], error="gave up after 1 attempts")
    assert record.to_json() == {
        "index": trial.index,
        "variant": trial.variant.name,
        "repeat": 1,
        "status": "failed",
        "name": trial.name,
        "memory_limit": profile.limits.memory,
        "model_device": None,
        "exit_code": None,
        "oom_killed": False,
        "error": "gave up after 1 attempts",
        "engine_backend": None,
        "unscheduled": True,
        "attempts": [
            {
                "node_id": "node-a",
                "started_utc": "2026-01-01T00:00:00.000Z",
                "ended_utc": "2026-01-01T00:00:01.000Z",
                "error": "node lost: gone",
            }
        ],
    }


def test_a_trial_interrupted_on_its_node_names_the_node(tmp_path: Path) -> None:
    profile = load_profile("tiny-oversub")
    trial = trial_plan(profile, 1)[1]
    node = {"node_id": "node-a", "hostname": "h"}
    record = not_run(trial, profile, [ATTEMPT], node=node)
    written = RayExecutor("127.0.0.1:6379", "cpu", "0" * 64, [], [])._record_only(tmp_path, record)
    on_disk = json.loads((tmp_path / "trials" / trial.name / "trial.json").read_text())
    assert on_disk == written == record.to_json()
    assert on_disk["status"] == "interrupted" and on_disk["interrupted"] is True and on_disk["node"] == node
    assert "unscheduled" not in on_disk and "error" not in on_disk
    assert TrialRecord.from_json(on_disk, "trial.json") == record
