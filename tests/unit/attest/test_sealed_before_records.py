"""A bundle sealed by main at daca34b (before trial, run and manifest records were typed)
still verifies, and its report still shows its trials.

tests/fixtures/sealed-main-daca34b/bundle/ is a real sweep of tiny-oversub run by the e2e
suite, cut to its inputs, its disk probe and two trials (no traces, plots or results.json), then
sealed by `finalize_bundle` at daca34b with a throwaway key whose public half is
`sealing-key.pub` (its private half was never kept). Nothing in it may change: a changed byte
is a tampered bundle, which is what this test would then say.
"""

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

from appliance.attest.verify import CheckName, Verdict, verify_bundle
from appliance.workflows.report_page import make_report
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "sealed-main-daca34b"


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "bundle"
    shutil.copytree(FIXTURE / "bundle", run)
    return run


def test_the_old_bundle_verifies_with_its_sealing_key(tmp_path: Path) -> None:
    result = verify_bundle(_copy(tmp_path), FIXTURE / "sealing-key.pub")
    assert result.verdict is Verdict.VERIFIED, result.summary()
    assert result.run_status == "complete"
    manifest = json.loads((FIXTURE / "bundle" / "manifest.json").read_text())
    assert result.bundle_digest == manifest["bundle_digest"]
    assert len(manifest["files"]) == 22
    assert {c.name for c in result.checks} >= {str(CheckName.MANIFEST), str(CheckName.RUN_STATUS)}


def test_the_old_bundle_renders_with_its_trials(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    key = FIXTURE / "sealing-key.pub"
    outcome = make_report(run, key=key, now=datetime(2026, 12, 3, 8, 0, tzinfo=UTC))
    text = outcome.path.read_text()
    assert outcome.verification.verdict is Verdict.VERIFIED
    rows = {
        "001-99.5MiB-baseline-r1": "<td>baseline</td><td>1</td><td>99.5MiB</td>"
        "<td>CPU; default placement</td><td>99.5</td><td>26066.5</td><td>ok</td>",
        "002-99.5MiB-demand-mmap-r1": "<td>demand-mmap</td><td>1</td><td>99.5MiB</td>"
        "<td>CPU; default placement</td><td>99.5</td><td>378.1</td><td>ok</td>",
    }
    for name, cells in rows.items():
        assert (
            f'<tr data-trial="{name}" data-limit="104337408" data-status="ok"><td>{name}</td>{cells}</tr>'
            in text
        )
