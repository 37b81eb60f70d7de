"""A trial flagged not comparable (measured decode reads below Belady) keeps its bundle's
per-variant figures out of an evidence comparison; a sweep names the trials its figures left
out."""

import json
from pathlib import Path

from appliance.attest.bundle import finalize_bundle
from appliance.evidence.compare import NOT_COMPARABLE, REPRODUCED
from appliance.runs.run_dir import RunDir
from tests.fake_run import make_run
from tests.unit.evidence.test_compare import as_finding, compared, key, miniature_finding, pair

__all__ = ["key", "pair"]  # fixtures


def _paging(run: Path, comparable: bool) -> None:
    flag = {"comparable": comparable, "checked": True, "belady_floor_bytes": 1000}
    path = RunDir(run).paging_analysis
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"lru_prediction": [{"trial": "002-demand-mmap-r1", "contamination": flag}]}))


def test_a_run_with_a_contaminated_trial_is_not_comparable(tmp_path: Path, key: Path) -> None:
    run = make_run(tmp_path)
    _paging(run, comparable=False)
    finalize_bundle(run, key)
    result = compared(run, as_finding(miniature_finding()))
    assert result.verdict == NOT_COMPARABLE
    assert result.reasons == [
        "trials with measured decode reads below Belady for their own trace (not comparable; "
        "rerun them one at a time on an isolated page cache): 002-demand-mmap-r1"
    ]


def test_a_run_whose_trials_are_all_comparable_still_reproduces(tmp_path: Path, key: Path) -> None:
    run = make_run(tmp_path)
    _paging(run, comparable=True)
    finalize_bundle(run, key)
    assert compared(run, as_finding(miniature_finding())).verdict == REPRODUCED
