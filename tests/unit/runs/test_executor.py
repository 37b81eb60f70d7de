"""The local executor runs trials in plan order (what a resumed run starts:
tests/unit/workflows/test_resume_check.py)."""

from pathlib import Path
from typing import Any

from appliance.runs.executor import LocalExecutor
from appliance.runs.plan import Trial, trial_plan
from appliance.runs.profile import load_profile


def test_local_executor_runs_every_trial_in_order_and_says_where(tmp_path: Path) -> None:
    profile = load_profile("tiny-oversub")
    plan = trial_plan(profile, 2)
    started: list[tuple[str, str]] = []

    def one_trial(trial: Trial, work_dir: Path) -> dict[str, Any]:
        (work_dir / trial.name).mkdir()
        return {"index": trial.index}

    records = list(
        LocalExecutor().run(
            one_trial, plan, tmp_path, on_start=lambda t, where: started.append((t.name, where))
        )
    )
    assert [r["index"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert started == [(t.name, "this machine") for t in plan]
    assert sorted(p.name for p in tmp_path.iterdir()) == [t.name for t in plan]
    assert LocalExecutor().describe() == {"kind": "local"}
