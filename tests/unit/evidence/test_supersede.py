"""Superseded findings: kept with their numbers, valid only when they name a current successor
in the same directory, never compared automatically (a profile's id resolves to the
successor; a sweep's lookup skips them), and "superseded by X: why" when asked for by name."""

import dataclasses
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from appliance.attest.verify import verify_bundle
from appliance.core.checks import Status
from appliance.core.errors import ConfigError
from appliance.core.paths import EVIDENCE_ENV
from appliance.evidence.bundle_facts import claimed_evidence
from appliance.evidence.compare import NOT_COMPARABLE, REPRODUCED, compare_with_evidence
from appliance.evidence.finding import current_ids, load_findings, validate_finding
from appliance.release.check import release_check
from appliance.runs.execute import RunOutcome
from appliance.runs.profile import load_profile
from appliance.runs.status import RunStatus
from appliance.workflows.report_page import make_report
from appliance.workflows.run import print_report, verify_and_compare
from tests.conftest import run_cli
from tests.fake_run import make_run, results
from tests.unit.evidence.test_compare import compared, key, miniature_finding, pair, sealed_run
from tests.unit.release.test_check import git_tree

__all__ = ["key", "pair"]  # fixtures

OLD, NEW = "tiny-oversub-demand-mmap", "tiny-oversub-demand-mmap-calibrated"
WHY = ["the demo's model changed: calibrated routers, 128 experts k=4"]


def superseded(finding_id: str = OLD, by: str = NEW, **changes: Any) -> dict[str, Any]:
    return miniature_finding(
        id=finding_id, status="superseded", superseded_by=by, superseded_because=WHY, **changes
    )


def write(directory: Path, *findings: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for raw in findings:
        (directory / f"{raw['id']}.json").write_text(json.dumps(raw, indent=2))
    return directory


@pytest.fixture
def evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary evidence/: OLD superseded by NEW (same scope), and what the CLI reads."""
    directory = write(tmp_path / "evidence", superseded(), miniature_finding(id=NEW))
    monkeypatch.setenv(EVIDENCE_ENV, str(directory))
    return directory


def test_a_superseded_finding_keeps_its_numbers_and_validates() -> None:
    raw = superseded()
    assert validate_finding(raw) == []
    assert raw["metrics"] == miniature_finding()["metrics"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda r: r.pop("superseded_by"),
            "/superseded_by: a superseded finding must name the finding that replaces it",
        ),
        (lambda r: r.pop("superseded_because"), "/superseded_because: a superseded finding must say why"),
        (lambda r: r.update(superseded_because=[]), "/superseded_because: needs at least 1 items"),
        (lambda r: r.update(superseded_because=[""]), "/superseded_because/0"),
        (lambda r: r.update(superseded_by="Not An Id"), "/superseded_by: 'Not An Id' does not match"),
        (lambda r: r.update(superseded_by=OLD), "/superseded_by: a finding cannot supersede itself"),
        (
            lambda r: r.update(status="measured"),
            "/superseded_by: only a finding with status 'superseded' has superseded_by",
        ),
    ],
)
def test_invalid_supersession_is_refused_with_the_field(edit: Any, message: str) -> None:
    raw = superseded()
    edit(raw)
    errors = validate_finding(raw)
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize(
    "findings, message",
    [
        (
            [superseded(by="nowhere")],
            "no finding 'nowhere' in {directory}: add it first or name one that exists",
        ),
        (
            [superseded(), superseded(NEW, by="third"), miniature_finding(id="third")],
            f"{NEW!r} is itself superseded by 'third': name the current finding",
        ),
    ],
    ids=["unknown successor", "successor superseded"],
)
def test_the_directory_refuses_a_successor_that_is_not_current(
    tmp_path: Path, findings: list[dict[str, Any]], message: str
) -> None:
    directory = write(tmp_path / "ev", *findings)
    with pytest.raises(ConfigError, match="/superseded_by: ") as raised:
        load_findings(directory)
    assert str(raised.value) == f"{directory / OLD}.json: /superseded_by: " + message.format(
        directory=directory
    )


def test_release_check_refuses_a_dangling_successor(tmp_path: Path) -> None:
    """The release check reads evidence/ through the same loader: a dangling successor fails it."""
    dangling = json.dumps(superseded(by="nowhere")).encode()
    tree = git_tree(tmp_path / "tree", {f"evidence/{OLD}.json": dangling})
    check = {c.name: c for c in release_check(tree)}["evidence-valid"]
    assert check.status is Status.FAIL
    assert check.reason == (
        f"evidence/{OLD}.json: /superseded_by: no finding 'nowhere' in evidence: "
        "add it first or name one that exists"
    )


def test_a_profile_names_resolve_to_the_successor_once(evidence: Path) -> None:
    assert current_ids([OLD, "missing", NEW, OLD]) == [NEW, "missing"]
    assert current_ids([OLD], evidence) == [NEW]


def test_a_broken_evidence_directory_leaves_the_ids_for_the_comparison_to_report(tmp_path: Path) -> None:
    directory = write(tmp_path / "ev", superseded(by="nowhere"))
    assert current_ids([OLD], directory) == [OLD]


def test_the_run_profile_list_resolves_and_the_sweep_lookup_skips(evidence: Path, tmp_path: Path) -> None:
    # fake_run's profile names OLD
    assert claimed_evidence(make_run(tmp_path / "run")) == [NEW]
    sweep_claim = {"limits_bytes": [209715200], "claims": []}
    write(evidence, superseded(sweep=sweep_claim), miniature_finding(id=NEW, sweep=sweep_claim))
    sweep_run = make_run(tmp_path / "sweep", result=results({"wall_s": 1.0}, {"wall_s": 1.0}) | {"sweep": {}})
    assert claimed_evidence(sweep_run) == [NEW]
    write(evidence, superseded(sweep=sweep_claim), miniature_finding(id=NEW))
    assert claimed_evidence(sweep_run) == []


def test_compare_says_superseded_by_whom_and_why(evidence: Path, tmp_path: Path, key: Path) -> None:
    run = sealed_run(tmp_path, key)
    old = {f.id: f for f in load_findings()}[OLD]
    result = compared(run, old)
    assert (result.verdict, result.claims) == (NOT_COMPARABLE, [])
    assert result.reasons == [f"superseded by {NEW}: {WHY[0]}"]
    # the same numbers, current, reproduce: it is the status alone that stops the comparison
    assert compared(run, {f.id: f for f in load_findings()}[NEW]).verdict == REPRODUCED


def test_cli_compare_by_name_says_superseded_and_by_default_uses_the_successor(
    evidence: Path, tmp_path: Path, key: Path
) -> None:
    run = sealed_run(tmp_path, key)
    env = {"APPLIANCE_TRUSTED_KEYS": os.environ["APPLIANCE_TRUSTED_KEYS"], EVIDENCE_ENV: str(evidence)}
    named = run_cli("evidence", "compare", str(run), "--evidence", OLD, env=env)
    assert named.returncode == 1
    assert named.stdout.splitlines() == [f"{OLD}: NOT COMPARABLE", f"  why: superseded by {NEW}: {WHY[0]}"]
    default = run_cli("evidence", "compare", str(run), "--json", env=env)
    assert default.returncode == 0, default.stderr
    assert [(r["evidence"], r["verdict"]) for r in json.loads(default.stdout)] == [(NEW, REPRODUCED)]


def test_cli_list_and_show_give_the_status_and_successor(evidence: Path) -> None:
    env = {EVIDENCE_ENV: str(evidence)}
    listed = json.loads(run_cli("evidence", "list", "--json", env=env, check=True).stdout)
    assert [(e["id"], e["status"], e["superseded_by"]) for e in listed] == [  # by file name
        (NEW, "measured", None),
        (OLD, "superseded", NEW),
    ]
    text = run_cli("evidence", "list", env=env, check=True).stdout.splitlines()
    assert "superseded" not in text[0]
    assert text[1].split()[:3] == [OLD, "reproduction", "superseded"]
    assert text[1].endswith(f"tiny oversub (superseded by {NEW}: {WHY[0]})")
    shown = run_cli("evidence", "show", OLD, env=env, check=True).stdout.splitlines()
    assert shown[:3] == ["tiny oversub", "reproduction, superseded", f"superseded by {NEW}: {WHY[0]}"]


def test_the_console_table_and_the_report_show_only_the_successor(
    evidence: Path, tmp_path: Path, key: Path
) -> None:
    run = sealed_run(tmp_path, key)
    profile = dataclasses.replace(load_profile("tiny-oversub"), evidence=(OLD,))
    outcome = RunOutcome(run, RunStatus.COMPLETE, [], {}, [])
    quiet = Console(file=io.StringIO())
    report = verify_and_compare(outcome, profile, None, quiet)
    assert [(c["evidence"], c["verdict"]) for c in report.comparisons] == [(NEW, REPRODUCED)]
    assert report.reproduced
    table = Console(file=io.StringIO(), width=200)
    print_report(report, table)
    shown = table.file.getvalue()  # type: ignore[attr-defined]
    assert NEW in shown and f"{OLD} " not in shown and f"{OLD}│" not in shown
    page = make_report(run).path.read_text()
    assert f'data-evidence="{NEW}"' in page and f'data-evidence="{OLD}"' not in page
    # asked for by name, the table row says why instead of comparing
    named = compare_with_evidence(run, verify_bundle(run), [OLD])
    assert [(c["evidence"], c["verdict"], c["reasons"]) for c in named] == [
        (OLD, NOT_COMPARABLE, [f"superseded by {NEW}: {WHY[0]}"])
    ]
