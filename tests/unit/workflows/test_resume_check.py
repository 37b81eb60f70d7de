"""Resume verifies before it trusts: an incomplete run directory is resumed only when its seal
verifies as incomplete (trusted key, every digest intact) and it was started with the same
profile, lock, trial plan, image and model. Every refusal is one line and leaves the directory
byte for byte as it was; an accepted one names the old bundle and the trials it carries over."""

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import KeyPair, init_keys
from appliance.core.digests import sha256_file
from appliance.core.errors import ConfigError
from appliance.engine.lock import load_lock
from appliance.runs.model_files import CheckedModel
from appliance.runs.plan import Trial, trial_plan
from appliance.runs.profile import Profile, load_profile
from appliance.runs.records import ResumedFrom
from appliance.runs.resume import needs_rerun, resume_point
from appliance.runs.trial import RunContext
from appliance.workflows.resume_check import resume_verifier, verify_for_resume
from tests.fake_run import RESUME_IMAGE_ID as IMAGE_ID
from tests.fake_run import resume_model as model
from tests.fake_run import sealed_incomplete_run
from tests.tamper import Keys


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    root = tmp_path_factory.mktemp("keys")
    return Keys(trusted=init_keys(root / "trusted"), untrusted=init_keys(root / "untrusted"))


@pytest.fixture(autouse=True)
def empty_trust_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the key the resumed run signs with (passed to the check) is trusted."""
    monkeypatch.setenv("APPLIANCE_TRUSTED_KEYS", str(tmp_path / "trusted-keys"))


def context(run: Path, profile: Profile, checked: CheckedModel | None = None) -> RunContext:
    return RunContext(None, profile, None, checked or model(), None, run, "new", Console(quiet=True))  # type: ignore[arg-type]


def resume(
    run: Path, plan: list[Trial], signer: KeyPair, ctx: RunContext | None = None, image_id: str = IMAGE_ID
) -> tuple[str, list[Trial], tuple[ResumedFrom, ...]]:
    """resume_point as `appliance run|sweep --resume` calls it, signing with `signer`."""
    ctx = ctx or context(run, load_profile("tiny-oversub"))
    return resume_point(ctx, plan, load_lock().raw, resume_verifier(signer.private), image_id)


def tree(directory: Path) -> str:
    """sha256 over every entry's path, kind and bytes: equal only for byte-identical trees."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        digest.update(path.relative_to(directory).as_posix().encode())
        digest.update(path.read_bytes() if path.is_file() else b"<dir>")
    return digest.hexdigest()


def test_a_genuine_incomplete_run_resumes_and_names_the_bundle_it_carries_over(
    tmp_path: Path, keys: Keys
) -> None:
    run, plan = sealed_incomplete_run(tmp_path, keys.trusted)
    manifest = json.loads((run / "manifest.json").read_text())
    envelope_sha = sha256_file(run / "attestation.dsse.json")
    ctx = context(run, load_profile("tiny-oversub"))
    started, pending, resumed_from = resume_point(
        ctx, plan, load_lock().raw, resume_verifier(keys.trusted.private), IMAGE_ID
    )
    assert started == "2026-01-01T00:00:00.000Z" and ctx.run_id == "abc123"
    assert [t.name for t in pending] == ["002-demand-mmap-r1", "003-demand-prefetch-r1"]
    assert [r.to_json() for r in resumed_from] == [
        {
            "bundle_digest": manifest["bundle_digest"],
            "attestation_sha256": envelope_sha,
            "signer": keys.trusted.keyid,
            "carried_over": ["001-baseline-r1"],
        }
    ]
    assert (run / "trials" / "001-baseline-r1" / "stdout.txt").read_text() == "kept"
    assert not (run / "trials" / "002-demand-mmap-r1").exists()
    assert not (run / "provenance.json").exists()  # collected afresh at the new seal
    # the old seal stays until the new one is whole
    assert json.loads((run / "manifest.json").read_text()) == manifest
    assert sha256_file(run / "attestation.dsse.json") == envelope_sha
    assert needs_rerun({"status": "failed", "unscheduled": True})
    assert not needs_rerun({"status": "oom-killed"})


def _edit_timing(run: Path) -> None:
    (run / "trials" / "001-baseline-r1" / "timing.json").write_text(
        json.dumps({"decode_tokens_per_s": 21.14})
    )


def _forge_trial(run: Path) -> None:
    (run / "trials" / "001-baseline-r1" / "trial.json").write_text('{"status": ["ok"]}')


def _deep_run_json(run: Path) -> None:
    (run / "run.json").write_text("[" * 100_000 + "]" * 100_000)


REFUSALS = {
    "tampered timing.json": (
        _edit_timing,
        r"verdict tampered, file-digests: changed: trials/001-baseline-r1/timing\.json\)",
    ),
    "forged trial.json": (
        _forge_trial,
        r"verdict tampered, file-digests: changed: trials/001-baseline-r1/trial\.json\)",
    ),
    "deep run.json": (_deep_run_json, r"verdict tampered, file-digests: changed: run\.json\)"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_an_altered_run_is_refused_in_one_line_and_nothing_changes(
    tmp_path: Path, keys: Keys, case: str
) -> None:
    run, plan = sealed_incomplete_run(tmp_path, keys.trusted)
    alter, message = REFUSALS[case]
    alter(run)
    before = tree(run)
    with pytest.raises(ConfigError, match=r"^cannot resume .*" + message + r"; nothing was changed") as err:
        resume(run, plan, keys.trusted)
    assert "\n" not in str(err.value)
    assert tree(run) == before


def test_a_bundle_signed_by_an_untrusted_key_is_refused(tmp_path: Path, keys: Keys) -> None:
    run, plan = sealed_incomplete_run(tmp_path, keys.untrusted)
    before = tree(run)
    with pytest.raises(ConfigError, match=r"verdict untrusted, signature: valid ed25519 signature by "):
        resume(run, plan, keys.trusted)
    assert tree(run) == before


def test_an_unsigned_bundle_is_refused(tmp_path: Path, keys: Keys) -> None:
    run, _ = sealed_incomplete_run(tmp_path, None)
    before = tree(run)
    with pytest.raises(
        ConfigError, match=r"verdict unsigned, signature: the attestation carries no signature"
    ):
        verify_for_resume(run, keys.trusted.private)
    assert tree(run) == before


def test_an_unsealed_run_is_refused(tmp_path: Path, keys: Keys) -> None:
    run, _ = sealed_incomplete_run(tmp_path, keys.trusted)
    (run / "manifest.json").unlink()
    before = tree(run)
    with pytest.raises(ConfigError, match=r"verdict tampered, manifest: manifest\.json is missing"):
        verify_for_resume(run, keys.trusted.private)
    assert tree(run) == before


def _other_profile(run: Path) -> dict[str, Any]:
    return {"ctx": context(run, load_profile("qwen35-8g"))}


def _other_image(run: Path) -> dict[str, Any]:
    return {"image_id": "sha256:" + "ef" * 32}


def _other_model(run: Path) -> dict[str, Any]:
    return {"ctx": context(run, load_profile("tiny-oversub"), model(8192))}


def _other_plan(run: Path) -> dict[str, Any]:
    return {"plan": trial_plan(load_profile("tiny-oversub"), 2)}


OTHER = {
    "profile": (_other_profile, r"another profile:"),
    "image": (_other_image, r"another image:"),
    "model": (_other_model, r"another model:"),
    "plan": (_other_plan, r"another trial plan \(--repeats, --memory, --variants\):"),
}


@pytest.mark.parametrize("case", sorted(OTHER))
def test_a_run_of_another_profile_image_model_or_plan_is_refused(
    tmp_path: Path, keys: Keys, case: str
) -> None:
    run, plan = sealed_incomplete_run(tmp_path, keys.trusted)
    change, message = OTHER[case]
    given: dict[str, Any] = {
        "ctx": context(run, load_profile("tiny-oversub")),
        "plan": plan,
        "image_id": IMAGE_ID,
    }
    given.update(change(run))
    before = tree(run)
    with pytest.raises(ConfigError, match=r"^\S+ was started with " + message + r".*nothing was changed$"):
        resume(run, given["plan"], keys.trusted, given["ctx"], given["image_id"])
    assert tree(run) == before


def test_a_complete_run_is_refused(tmp_path: Path, keys: Keys) -> None:
    run, _ = sealed_incomplete_run(tmp_path, keys.trusted)
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, "status": "complete"}))
    (run / "provenance.json").unlink()
    finalize_bundle(run, keys.trusted.private)
    before = tree(run)
    with pytest.raises(ConfigError, match=r"is complete: nothing to resume"):
        verify_for_resume(run, keys.trusted.private)
    assert tree(run) == before
