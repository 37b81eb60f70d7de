"""`evidence compare --allow-untrusted` reads files of a bundle anyone may have signed: every
shape they can take ends in a verdict or the project's own error, never a crash."""

import json
import random
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.verify import Verdict, Verification
from appliance.core.errors import ApplianceError
from appliance.evidence.bundle_facts import BundleFacts, claimed_evidence
from appliance.evidence.compare import compare
from appliance.evidence.finding import load_findings
from fuzz.mutate import mutate_tree
from tests.fake_run import make_run

FILES = ("results.json", "run.json", "provenance.json", "inputs/model.json", "inputs/schedule.json")
SWEEP = {
    "limits": [104337408, 208674816, 500826112],
    "summary": [
        {
            "memory_limit": limit,
            "variant": variant,
            "measured_over_lru": 1.4,
            "belady_over_lru": 0.5,
            "disk_fraction": 0.1,
            "capacity_miss_share_lru": 0.8,
        }
        for limit in (104337408, 208674816, 500826112)
        for variant in ("baseline", "demand-mmap", "demand-prefetch")
    ],
}
ACCEPTED = Verification(checks=[], verdict=Verdict.UNTRUSTED, allowed=frozenset({Verdict.UNTRUSTED}))


FINDINGS = load_findings()


def _read_all(run: Path) -> None:
    claimed_evidence(run)
    BundleFacts.read(run)
    for finding in FINDINGS:
        compare(run, finding, ACCEPTED)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = make_run(tmp_path_factory.mktemp("facts"))
    results = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**results, "sweep": SWEEP}))
    if not (run / "provenance.json").exists():
        (run / "provenance.json").write_text(json.dumps({"host": {"gpus": [{"name": "x"}]}}))
    _read_all(run)
    return run


@pytest.mark.parametrize("name", FILES)
def test_mutated_bundle_files_never_crash_the_comparison(run: Path, name: str) -> None:
    path = run / name
    original = path.read_bytes()
    tree: Any = json.loads(original)
    rng = random.Random(name)
    try:
        for _ in range(150):
            path.write_text(json.dumps(mutate_tree(rng, tree)))
            try:
                _read_all(run)
            except ApplianceError as exc:
                assert "\n" not in str(exc)
    finally:
        path.write_bytes(original)


@pytest.mark.parametrize(
    "text", ["- a list\n", "just text\n", "limits: [1, 2]\nschedule: 7\n", "{{{{ not yaml", ""]
)
def test_a_profile_of_any_shape_is_read_as_no_profile(run: Path, text: str) -> None:
    path = run / "inputs" / "profile.yaml"
    original = path.read_bytes()
    try:
        path.write_text(text)
        facts = BundleFacts.read(run)
        assert isinstance(facts.profile, dict)
        _read_all(run)
    finally:
        path.write_bytes(original)
