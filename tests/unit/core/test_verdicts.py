"""Verdicts and statuses are enums compared by member, never as bare strings."""

import ast
import json

from appliance.planner.plan import VERDICT_TEXT, PlanVerdict
from appliance.runs.status import RunStatus, TrialStatus
from tests.conftest import REPO

VALUES = {v.value for enum in (PlanVerdict, RunStatus, TrialStatus) for v in enum} | {
    "reproduced",
    "not reproduced",
    "not comparable",
}
# Bundle verdicts and check statuses belong to the bundle verifier's own enum.
OWN_VOCABULARY = {"appliance/attest/bundle.py", "appliance/cli/bundle.py"}


def _bare_comparisons(path: str, source: str | None = None) -> list[str]:
    tree = ast.parse((REPO / path).read_text() if source is None else source, path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                values = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                found += [
                    f"{path}:{node.lineno} {v.value!r}"
                    for v in values
                    if isinstance(v, ast.Constant) and v.value in VALUES
                ]
    return found


def test_no_verdict_or_status_is_compared_as_a_bare_string() -> None:
    problems = []
    for path in sorted((REPO / "appliance").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel not in OWN_VOCABULARY:
            problems += _bare_comparisons(rel)
    assert problems == []


def test_enums_serialize_as_their_json_values() -> None:
    assert json.dumps({TrialStatus.OOM_KILLED: RunStatus.COMPLETE}) == '{"oom-killed": "complete"}'
    assert set(VERDICT_TEXT) == set(PlanVerdict)
    assert PlanVerdict("does_not_start").text == "does not start"
    assert [s.value for s in TrialStatus] == [
        "ok",
        "oom-killed",
        "failed",
        "timed-out",
        "interrupted",
        "over-budget",
    ]


def test_the_scan_sees_bare_comparisons() -> None:
    probe = 'if s != "ok" or v in ("x", "reproduced") or "complete" == r: pass\n'
    assert _bare_comparisons("probe.py", probe) == [
        "probe.py:1 'ok'",
        "probe.py:1 'reproduced'",
        "probe.py:1 'complete'",
    ]
