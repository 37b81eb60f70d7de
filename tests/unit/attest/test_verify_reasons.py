"""Every check's status, reason and named files, exactly, for the genuine bundle and for each
tamper of the battery (tests/tamper.py) and of the one-check tampers (test_verify_checks.py).

The expectations are written out here, from the bundle as the test sees it (its files counted
on disk, its digest as the sealer recorded it), never taken from a verification: a check whose
reason or files changed, or that passed or failed where it should not, fails a test by name.
"""

import base64
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.bundle import ATTESTATION_FILE, MANIFEST_FILE
from appliance.attest.verify import CheckName, Verdict, verify_bundle
from appliance.core.checks import Status
from tests.tamper import Keys, another_genuine_bundle, cases
from tests.unit.attest.test_verify_checks import BAD_SUBJECT_LIST_FAILS, TAMPER_BY_CHECK

PASS, FAIL = Status.PASS, Status.FAIL
Line = tuple[Status, str, list[str]]
Expected = dict[str, Line]


def _files(run: Path) -> list[str]:
    """The bundle's regular files, sealing files aside, counted here without the verifier."""
    found = []
    for top, _, names in os.walk(run):
        for name in names:
            rel = (Path(top) / name).relative_to(run).as_posix()
            if rel not in (MANIFEST_FILE, ATTESTATION_FILE):
                found.append(rel)
    return sorted(found)


def _recorded_digest(run: Path) -> str:
    return str(json.loads((run / MANIFEST_FILE).read_text())["bundle_digest"])


def passing(n: int, digest: str, signer: str, subjects: int | None = None) -> Expected:
    """The twelve checks of a bundle of n files, all passing, in the verifier's order."""
    s = n if subjects is None else subjects
    return {
        CheckName.MANIFEST: (PASS, f"manifest.json lists {s} files", []),
        CheckName.ATTESTATION: (PASS, f"in-toto Statement v1 with {s} subjects in a DSSE envelope", []),
        CheckName.ATTESTATION_DIGEST: (PASS, "attestation file matches the manifest", []),
        CheckName.SIGNATURE: (PASS, f"valid ed25519 signature by {signer}, a trusted key", []),
        CheckName.PLAIN_FILES: (PASS, f"{n} regular files, nothing else", []),
        CheckName.SUBJECT_NAMES: (PASS, f"{s} distinct, normalised relative subject names", []),
        CheckName.SUBJECTS_COVER_FILES: (
            PASS,
            f"the statement's {s} subjects are exactly the bundle's regular files",
            [],
        ),
        CheckName.FILE_DIGESTS: (PASS, f"{s} file digests recomputed and equal to the statement's", []),
        CheckName.MANIFEST_MATCHES_STATEMENT: (
            PASS,
            "manifest lists the statement's subjects with the same digests and the files' sizes",
            [],
        ),
        CheckName.BUNDLE_DIGEST: (PASS, f"bundle digest {digest}", []),
        CheckName.PROVENANCE: (PASS, "provenance.json equals the signed predicate's provenance", []),
        CheckName.RUN_STATUS: (PASS, "run completed", []),
    }


def _observed(result: Any) -> Expected:
    return {c.name: (c.status, c.reason, list(c.files)) for c in result.checks}


TAMPERED_SUMMARY = "verdict: TAMPERED: failed {}: the bundle is not what was sealed; do not use its results"
NO_SIGNATURE = (
    "no signature verifies with any trusted key or with the key recorded in manifest.json: "
    "the statement or signature was altered"
)
NO_SUBJECTS = (FAIL, "no valid subjects to compare the files with", [])


def _unreadable_statement(base: Expected, reason: str) -> Expected:
    """The attestation refused: the checks that read the statement fail, those after are not run."""
    return {
        CheckName.MANIFEST: base[CheckName.MANIFEST],
        CheckName.ATTESTATION: (FAIL, reason, [ATTESTATION_FILE]),
        CheckName.SIGNATURE: (FAIL, "no readable attestation to check", []),
        CheckName.PLAIN_FILES: base[CheckName.PLAIN_FILES],
        CheckName.SUBJECT_NAMES: (FAIL, "no statement to read subjects from", []),
        CheckName.SUBJECTS_COVER_FILES: NO_SUBJECTS,
    }


def _bad_subject_list(base: Expected, files: list[str], subject_names: Line) -> Expected:
    """A refused subject list is not used: every comparison with it fails (and no file digest
    is recomputed)."""
    return {
        **{name: line for name, line in base.items() if name != CheckName.FILE_DIGESTS},
        CheckName.SUBJECT_NAMES: subject_names,
        CheckName.SUBJECTS_COVER_FILES: NO_SUBJECTS,
        CheckName.MANIFEST_MATCHES_STATEMENT: (
            FAIL,
            "manifest and statement disagree on: " + ", ".join(files),
            files,
        ),
        # the digest of no subjects at all: sha256 of the canonical JSON "{}"
        CheckName.BUNDLE_DIGEST: (
            FAIL,
            "bundle digest in the manifest or the predicate does not match the subjects "
            "(44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a)",
            [MANIFEST_FILE],
        ),
        CheckName.PROVENANCE: (
            FAIL,
            "provenance.json is not a subject of the statement",
            ["provenance.json"],
        ),
        CheckName.RUN_STATUS: (FAIL, "run.json is not a subject of the statement", ["run.json"]),
    }


def expected_battery(
    name: str, run: Path, genuine: Path, keys: Keys, store: Path
) -> tuple[Verdict, str, Expected]:
    """(verdict, summary, checks) for one case of tests.tamper.cases, applied to run."""
    files, digest, signer = _files(genuine), _recorded_digest(genuine), keys.trusted.keyid
    n = len(files)
    base = passing(n, digest, signer)
    untrusted_reason = (
        f"valid ed25519 signature by {keys.untrusted.keyid} (id recomputed from the key in "
        f"manifest.json), which is not in the trust store ({store})"
    )
    untrusted_summary = (
        f"verdict: UNTRUSTED: signature: valid signature by key {keys.untrusted.keyid}, which is "
        f"not in the trust store ({store}); if you trust its owner, run `appliance keys trust "
        "PUBKEY_FILE` with their public key, or pass --allow-untrusted to explore it anyway"
    )
    resealed = {
        **base,
        CheckName.SIGNATURE: (FAIL, untrusted_reason, []),
        CheckName.BUNDLE_DIGEST: (PASS, f"bundle digest {_recorded_digest(run)}", []),
    }
    table: dict[str, tuple[Verdict, list[str], Expected]] = {
        "byte-flipped": (
            Verdict.TAMPERED,
            [CheckName.FILE_DIGESTS],
            {**base, CheckName.FILE_DIGESTS: (FAIL, "changed: results.json", ["results.json"])},
        ),
        "file-added": (
            Verdict.TAMPERED,
            [CheckName.SUBJECTS_COVER_FILES],
            {
                **base,
                CheckName.PLAIN_FILES: (PASS, f"{n + 1} regular files, nothing else", []),
                CheckName.SUBJECTS_COVER_FILES: (FAIL, "added: trials/extra.txt", ["trials/extra.txt"]),
            },
        ),
        "file-removed": (
            Verdict.TAMPERED,
            [CheckName.SUBJECTS_COVER_FILES, CheckName.MANIFEST_MATCHES_STATEMENT],
            {
                **base,
                CheckName.PLAIN_FILES: (PASS, f"{n - 1} regular files, nothing else", []),
                CheckName.SUBJECTS_COVER_FILES: (
                    FAIL,
                    "removed: inputs/schedule.json",
                    ["inputs/schedule.json"],
                ),
                CheckName.FILE_DIGESTS: (
                    PASS,
                    f"{n - 1} file digests recomputed and equal to the statement's",
                    [],
                ),
                CheckName.MANIFEST_MATCHES_STATEMENT: (
                    FAIL,
                    "manifest and statement disagree on: inputs/schedule.json",
                    ["inputs/schedule.json"],
                ),
            },
        ),
        "file-renamed": (
            Verdict.TAMPERED,
            [CheckName.SUBJECTS_COVER_FILES, CheckName.MANIFEST_MATCHES_STATEMENT],
            {
                **base,
                CheckName.SUBJECTS_COVER_FILES: (
                    FAIL,
                    "added: results-renamed.json; removed: results.json",
                    ["results-renamed.json", "results.json"],
                ),
                CheckName.FILE_DIGESTS: (
                    PASS,
                    f"{n - 1} file digests recomputed and equal to the statement's",
                    [],
                ),
                CheckName.MANIFEST_MATCHES_STATEMENT: (
                    FAIL,
                    "manifest and statement disagree on: results.json",
                    ["results.json"],
                ),
            },
        ),
        "statement-edited": (
            Verdict.TAMPERED,
            [CheckName.SIGNATURE, CheckName.RUN_STATUS],
            {
                **base,
                CheckName.SIGNATURE: (FAIL, NO_SIGNATURE, [ATTESTATION_FILE]),
                CheckName.RUN_STATUS: (
                    FAIL,
                    "run.json and the signed predicate differ on profile",
                    ["run.json"],
                ),
            },
        ),
        "resealed-untrusted": (Verdict.UNTRUSTED, [], resealed),
        "resealed-untrusted-with-trusted-id": (Verdict.UNTRUSTED, [], resealed),
        "signature-stripped": (
            Verdict.UNSIGNED,
            [],
            {**base, CheckName.SIGNATURE: (FAIL, "the attestation carries no signature", [])},
        ),
        "signature-truncated": (
            Verdict.TAMPERED,
            [CheckName.SIGNATURE],
            {**base, CheckName.SIGNATURE: (FAIL, NO_SIGNATURE, [ATTESTATION_FILE])},
        ),
        "payload-type-changed": (
            Verdict.TAMPERED,
            [
                CheckName.ATTESTATION,
                CheckName.SIGNATURE,
                CheckName.SUBJECT_NAMES,
                CheckName.SUBJECTS_COVER_FILES,
            ],
            _unreadable_statement(
                base,
                "attestation payload type is 'application/json', expected 'application/vnd.in-toto+json'",
            ),
        ),
        "another-bundles-envelope": (
            Verdict.TAMPERED,
            [CheckName.FILE_DIGESTS, CheckName.MANIFEST_MATCHES_STATEMENT, CheckName.BUNDLE_DIGEST],
            {
                **base,
                CheckName.FILE_DIGESTS: (FAIL, "changed: results.json", ["results.json"]),
                CheckName.MANIFEST_MATCHES_STATEMENT: (
                    FAIL,
                    "manifest and statement disagree on: results.json",
                    ["results.json"],
                ),
                CheckName.BUNDLE_DIGEST: (
                    FAIL,
                    "bundle digest in the manifest or the predicate does not match the subjects "
                    f"({_other_digest(run)})",
                    [MANIFEST_FILE],
                ),
            },
        ),
        "symlink-for-file": (
            Verdict.TAMPERED,
            [CheckName.PLAIN_FILES, CheckName.SUBJECTS_COVER_FILES, CheckName.MANIFEST_MATCHES_STATEMENT],
            {
                **base,
                CheckName.PLAIN_FILES: (
                    FAIL,
                    "not regular files: results.json (symbolic link)",
                    ["results.json"],
                ),
                CheckName.SUBJECTS_COVER_FILES: (FAIL, "removed: results.json", ["results.json"]),
                CheckName.FILE_DIGESTS: (
                    PASS,
                    f"{n - 1} file digests recomputed and equal to the statement's",
                    [],
                ),
                CheckName.MANIFEST_MATCHES_STATEMENT: (
                    FAIL,
                    "manifest and statement disagree on: results.json",
                    ["results.json"],
                ),
            },
        ),
        "fifo-added": (
            Verdict.TAMPERED,
            [CheckName.PLAIN_FILES],
            {**base, CheckName.PLAIN_FILES: (FAIL, "not regular files: trials/pipe (FIFO)", ["trials/pipe"])},
        ),
        "subject-twice": (
            Verdict.TAMPERED,
            list(BAD_SUBJECT_LIST_FAILS),
            {
                **_bad_subject_list(
                    base, files, (FAIL, f"subject 1 {files[0]!r}: is listed twice", [files[0]])
                ),
                CheckName.ATTESTATION: (
                    PASS,
                    f"in-toto Statement v1 with {n + 1} subjects in a DSSE envelope",
                    [],
                ),
            },
        ),
        "provenance-differs": (
            Verdict.TAMPERED,
            [CheckName.PROVENANCE],
            {
                **base,
                CheckName.PROVENANCE: (
                    FAIL,
                    "provenance.json differs from the provenance in the signed predicate "
                    "(compared as canonical JSON)",
                    ["provenance.json"],
                ),
            },
        ),
        "incomplete-marked-complete": (
            Verdict.TAMPERED,
            [CheckName.FILE_DIGESTS, CheckName.MANIFEST_MATCHES_STATEMENT, CheckName.RUN_STATUS],
            {
                **base,
                CheckName.FILE_DIGESTS: (FAIL, "changed: run.json", ["run.json"]),
                CheckName.MANIFEST_MATCHES_STATEMENT: (
                    FAIL,
                    "manifest and statement disagree on: run.json",
                    ["run.json"],
                ),
                CheckName.BUNDLE_DIGEST: (PASS, f"bundle digest {_recorded_digest(run)}", []),
                CheckName.RUN_STATUS: (
                    FAIL,
                    "run.json says 'complete', the signed predicate 'incomplete', the manifest 'complete'",
                    ["run.json"],
                ),
            },
        ),
    }
    verdict, failed, checks = table[name]
    if verdict is Verdict.TAMPERED:
        summary = TAMPERED_SUMMARY.format(", ".join(failed))
    elif verdict is Verdict.UNTRUSTED:
        summary = untrusted_summary
    else:
        summary = (
            "verdict: UNSIGNED: signature: the bundle is unsigned: its origin is unknown; ask its "
            "author for a signed bundle, or pass --allow-unsigned to explore it anyway"
        )
    return verdict, summary, checks


def _other_digest(run: Path) -> str:
    """The digest the other bundle's statement commits to (its predicate's, as signed)."""
    envelope = json.loads((run / ATTESTATION_FILE).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    return str(statement["predicate"]["bundle_digest"])


@pytest.fixture
def fresh(tmp_path: Path, genuine: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(genuine, copy, symlinks=True)
    return copy


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory, genuine: Path, keys: Keys) -> Path:
    return another_genuine_bundle(genuine, tmp_path_factory.mktemp("other"), keys)


def test_the_genuine_bundle_passes_every_check_with_its_reason(
    genuine: Path, keys: Keys, trust_store: Path
) -> None:
    result = verify_bundle(genuine)
    files = _files(genuine)
    assert len(files) == 50  # tests.fake_run's run: the counts below are of these files
    assert _observed(result) == passing(len(files), _recorded_digest(genuine), keys.trusted.keyid)
    assert result.summary() == (
        f"verdict: VERIFIED: every check passed; signed by trusted key {keys.trusted.keyid}"
    )
    assert (result.signer, result.bundle_digest, result.run_status) == (
        keys.trusted.keyid,
        _recorded_digest(genuine),
        "complete",
    )


BATTERY = [case.name for case in cases(Path("unused"))]


@pytest.mark.parametrize("name", BATTERY)
def test_each_tamper_of_the_battery_fails_exactly_its_checks_with_their_reasons(
    name: str, fresh: Path, genuine: Path, other: Path, keys: Keys, trust_store: Path
) -> None:
    case = next(c for c in cases(other) if c.name == name)
    case.tamper(fresh, keys)
    verdict, summary, checks = expected_battery(name, fresh, genuine, keys, trust_store)
    result = verify_bundle(fresh)
    assert result.verdict is verdict
    assert _observed(result) == checks
    assert list(_observed(result)) == list(checks)  # in the verifier's order
    assert result.summary() == summary


ONLY: dict[str, Callable[[Expected, list[str], Path], Expected]] = {
    CheckName.MANIFEST: lambda base, files, run: {
        name: line
        for name, line in {
            **base,
            CheckName.MANIFEST: (
                FAIL,
                "manifest.json is not a version 1 manifest (exactly manifest_version, created_by, "
                "run_status, bundle_digest, files, attestation; attestation naming attestation.dsse.json)",
                [MANIFEST_FILE],
            ),
            CheckName.RUN_STATUS: (
                FAIL,
                "run.json says 'complete', the signed predicate 'complete', the manifest None",
                ["run.json"],
            ),
        }.items()
        # without a manifest nothing is compared with it
        if name
        not in (CheckName.ATTESTATION_DIGEST, CheckName.MANIFEST_MATCHES_STATEMENT, CheckName.BUNDLE_DIGEST)
    },
    CheckName.ATTESTATION: lambda base, files, run: _unreadable_statement(
        base,
        "statement lacks subjects or a predicate, or has predicate type "
        "'https://example.invalid/other-predicate', expected 'urn:moe-appliance:predicate:run:v1'",
    ),
    CheckName.ATTESTATION_DIGEST: lambda base, files, run: {
        **base,
        CheckName.ATTESTATION_DIGEST: (
            FAIL,
            "attestation file differs from the sha256 in the manifest (statement or signature "
            "changed after sealing)",
            [ATTESTATION_FILE],
        ),
    },
    CheckName.SIGNATURE: lambda base, files, run: {
        **base,
        CheckName.SIGNATURE: (FAIL, NO_SIGNATURE, [ATTESTATION_FILE]),
    },
    CheckName.PLAIN_FILES: lambda base, files, run: {
        **base,
        CheckName.PLAIN_FILES: (FAIL, "not regular files: trials/pipe (FIFO)", ["trials/pipe"]),
    },
    CheckName.SUBJECT_NAMES: lambda base, files, run: _bad_subject_list(
        base,
        files,
        (FAIL, f"subject 0 {'/' + files[0]!r}: absolute or not a POSIX path", ["/" + files[0]]),
    ),
    CheckName.SUBJECTS_COVER_FILES: lambda base, files, run: {
        **base,
        CheckName.PLAIN_FILES: (PASS, f"{len(files) + 1} regular files, nothing else", []),
        CheckName.SUBJECTS_COVER_FILES: (FAIL, "added: trials/extra.txt", ["trials/extra.txt"]),
    },
    CheckName.FILE_DIGESTS: lambda base, files, run: {
        **base,
        CheckName.FILE_DIGESTS: (FAIL, "changed: results.json", ["results.json"]),
    },
    CheckName.MANIFEST_MATCHES_STATEMENT: lambda base, files, run: {
        **base,
        CheckName.MANIFEST_MATCHES_STATEMENT: (
            FAIL,
            "manifest and statement disagree on: results.json",
            ["results.json"],
        ),
    },
    CheckName.BUNDLE_DIGEST: lambda base, files, run: {
        **base,
        CheckName.BUNDLE_DIGEST: (
            FAIL,
            "bundle digest in the manifest or the predicate does not match the subjects "
            f"({base['bundle-digest'][1].removeprefix('bundle digest ')})",
            [MANIFEST_FILE],
        ),
    },
    CheckName.PROVENANCE: lambda base, files, run: {
        **base,
        CheckName.PROVENANCE: (
            FAIL,
            "provenance.json differs from the provenance in the signed predicate "
            "(compared as canonical JSON)",
            ["provenance.json"],
        ),
    },
    CheckName.RUN_STATUS: lambda base, files, run: {
        **base,
        CheckName.RUN_STATUS: (
            FAIL,
            "run.json says 'complete', the signed predicate 'incomplete', the manifest 'complete'",
            ["run.json"],
        ),
    },
}


def test_every_one_check_tamper_has_its_reasons_here() -> None:
    assert set(ONLY) == set(TAMPER_BY_CHECK)


@pytest.mark.parametrize("check", sorted(ONLY))
def test_each_one_check_tamper_fails_with_exactly_these_reasons(
    check: str, fresh: Path, genuine: Path, keys: Keys, trust_store: Path
) -> None:
    TAMPER_BY_CHECK[check].tamper(fresh, keys)
    files = _files(genuine)
    base = passing(len(files), _recorded_digest(genuine), keys.trusted.keyid)
    expected = ONLY[check](base, files, fresh)
    result = verify_bundle(fresh)
    assert _observed(result) == expected
    assert list(_observed(result)) == list(expected)  # in the verifier's order
    failed = [name for name, line in expected.items() if line[0] is FAIL]
    assert result.summary() == TAMPERED_SUMMARY.format(", ".join(failed))
