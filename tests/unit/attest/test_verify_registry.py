"""The verifier's check registry (appliance/attest/verify.py CHECKS): its order satisfies every
check's declared inputs, each fact has one check that establishes it, a check reads and writes
only what it declares, and a check whose needed fact is missing is reported or left out as it
declares."""

import os
import shutil
from pathlib import Path
from typing import Any, ClassVar

import pytest

from appliance.attest.verify import (
    CHECKS,
    MANIFEST_DOC,
    STATEMENT,
    SUBJECTS,
    Bundle,
    BundleCheck,
    CheckName,
    Fact,
    Facts,
    ManifestCheck,
    Outcome,
    Verdict,
    run_checks,
    verify_bundle,
)
from appliance.core.checks import Status
from appliance.runs.run_dir import ATTESTATION_FILE, MANIFEST_FILE
from tests.tamper import Keys, _statement, check_named, sign_statement


def order_problems(checks: tuple[BundleCheck, ...]) -> list[str]:
    """Each fact a check needs or uses that no check before it establishes."""
    problems = []
    for index, check in enumerate(checks):
        before = {fact for earlier in checks[:index] for fact in earlier.provides}
        for fact in check.needs + check.uses:
            if fact not in before:
                problems.append(f"{check.name} reads {fact.label}, which no check before it establishes")
    return problems


def test_the_registry_order_satisfies_every_declared_dependency() -> None:
    assert order_problems(CHECKS) == []


def test_the_order_test_catches_a_check_run_before_what_it_reads() -> None:
    names = [check.name for check in CHECKS]
    cover = names.index(CheckName.SUBJECTS_COVER_FILES)
    swapped = list(CHECKS)
    swapped[cover - 1], swapped[cover] = swapped[cover], swapped[cover - 1]  # before subject-names
    assert order_problems(tuple(swapped)) == [
        "subjects-cover-files reads the valid subjects, name to sha256, which no check before it establishes"
    ]
    assert order_problems(CHECKS[::-1])[:2] == [
        "run-status reads the in-toto statement, with subjects and a predicate, which no check "
        "before it establishes",
        "run-status reads the bundle's regular files, which no check before it establishes",
    ]


def test_each_name_has_one_check_and_each_fact_one_check_that_establishes_it() -> None:
    names = [check.name for check in CHECKS]
    assert sorted(names) == sorted(set(CheckName) - {CheckName.TRUST_STORE})
    provided = [fact for check in CHECKS for fact in check.provides]
    assert len(provided) == len(set(provided)) == 10
    assert {fact for check in CHECKS for fact in check.needs + check.uses} <= set(provided)


def test_a_genuine_bundle_reports_every_check_in_the_registry_order(genuine: Path, trust_store: Path) -> None:
    result = verify_bundle(genuine)
    assert result.verdict is Verdict.VERIFIED
    assert [c.name for c in result.checks] == [check.name for check in CHECKS]
    assert [type(c.name) for c in result.checks] == [str] * len(CHECKS)  # plain names in JSON


class _Reads(BundleCheck):
    """A check that reads (need, use) or writes (put) one fact, declared or not."""

    name = CheckName.PROVENANCE
    needs: ClassVar[tuple[Fact[Any], ...]] = (MANIFEST_DOC,)

    def __init__(self, how: str, fact: Fact[Any]) -> None:
        self.how, self.fact = how, fact

    def run(self, bundle: Bundle, facts: Facts) -> Outcome:
        if self.how == "put":
            facts.put(self.fact, {})
        else:
            getattr(facts, self.how)(self.fact)
        return Outcome(True, "read")


@pytest.mark.parametrize(
    ("how", "fact", "verb"),
    [("need", STATEMENT, "needs"), ("use", MANIFEST_DOC, "uses"), ("put", SUBJECTS, "provides")],
)
def test_a_check_reads_and_writes_only_the_facts_it_declares(
    how: str, fact: Fact[Any], verb: str, genuine: Path
) -> None:
    with pytest.raises(LookupError) as caught:
        run_checks(Bundle(genuine, {}, False), (ManifestCheck(), _Reads(how, fact)))
    assert str(caught.value) == f"check provenance {verb} {fact.label}, which it does not declare"
    declared = run_checks(Bundle(genuine, {}, False), (ManifestCheck(), _Reads("need", MANIFEST_DOC)))
    assert [(c.name, c.reason) for c in declared.checks][1:] == [(CheckName.PROVENANCE, "read")]


class _Reported(_Reads):
    unmet = "no manifest to read"


@pytest.mark.parametrize("check", [_Reported, _Reads])
def test_a_check_whose_needed_fact_is_missing_is_reported_or_left_out_as_it_declares(
    check: type[_Reads], tmp_path: Path
) -> None:
    unmet = check.unmet
    run = run_checks(Bundle(tmp_path, {}, False), (ManifestCheck(), check("need", MANIFEST_DOC)))
    reported = [(c.name, c.status, c.reason, c.files) for c in run.checks]
    missing = (
        CheckName.MANIFEST,
        Status.FAIL,
        f"{MANIFEST_FILE} is missing (seal it with `appliance bundle sign DIR`)",
        [MANIFEST_FILE],
    )
    if unmet is None:
        assert reported == [missing]
        assert run.broken == [CheckName.MANIFEST]
    else:
        assert reported == [missing, (CheckName.PROVENANCE, Status.FAIL, unmet, [])]
        assert run.broken == [CheckName.MANIFEST, CheckName.PROVENANCE]
    assert run.facts == {}


def test_a_valid_empty_subject_list_is_compared_with_the_files_even_after_another_failure(
    tmp_path: Path, genuine: Path, keys: Keys, trust_store: Path
) -> None:
    """subject-names passes an empty list: subjects-cover-files compares it with the files (before
    the registry, an earlier failure made it say "no valid subjects", contradicting subject-names)."""
    fresh = tmp_path / "bundle"
    shutil.copytree(genuine, fresh, symlinks=True)
    statement = _statement(fresh)
    statement["subject"] = []
    sign_statement(fresh, statement, keys.trusted)
    os.mkfifo(fresh / "pipe")  # plain-files fails first
    every = (
        Path(top, name).relative_to(fresh).as_posix() for top, _, names in os.walk(fresh) for name in names
    )
    files = sorted(set(every) - {MANIFEST_FILE, ATTESTATION_FILE, "pipe"})
    result = verify_bundle(fresh)
    assert result.verdict is Verdict.TAMPERED
    names = check_named(result, CheckName.SUBJECT_NAMES)
    assert (names.status, names.reason) == (Status.PASS, "0 distinct, normalised relative subject names")
    cover = check_named(result, CheckName.SUBJECTS_COVER_FILES)
    assert (cover.status, cover.reason, cover.files) == (Status.FAIL, f"added: {', '.join(files)}", files)
