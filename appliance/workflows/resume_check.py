"""Resume verifies before it trusts: the check `appliance run|sweep --resume` hands the runner.

A run directory is resumed only when its seal verifies as a faithful record of a run that did
not complete (verdict `incomplete`: signed by a trusted key, every subject's digest intact).
Any other verdict refuses in one line, before anything in the directory changes. The record
returned names the old bundle in the resumed run's `run.json` and provenance (`resumed_from`):
its bundle digest, the sha256 of its attestation envelope (the file's bytes) and the key that
signed it. The runner (`appliance.runs.resume`) then checks the profile, lock, trial plan,
image and model against the now-trusted directory.
"""

from pathlib import Path

from appliance.attest.dsse import PUBLIC_KEY_FILE, load_public_key
from appliance.attest.trust import keys_of, store_entries
from appliance.attest.verify import Verdict, verify_bundle
from appliance.core.checks import Status
from appliance.core.digests import sha256_file
from appliance.core.errors import ConfigError
from appliance.runs.records import ResumedFrom
from appliance.runs.resume import ResumeVerifier
from appliance.runs.run_dir import RunDir


def signing_public_key(key: Path) -> Path:
    """The public key file beside a private key file, or in a key directory."""
    return key / PUBLIC_KEY_FILE if key.is_dir() else key.with_name(PUBLIC_KEY_FILE)


def verify_for_resume(run_dir: Path, key: Path | None = None) -> ResumedFrom:
    """The old bundle's record for `resumed_from`, when run_dir's seal verifies as incomplete
    by a key in the trust store (or `key`, the private key the resumed run signs with);
    otherwise one ConfigError line saying why, and nothing is changed."""
    trusted = keys_of(store_entries())
    if key is not None:
        public = load_public_key(signing_public_key(key))
        trusted[public.keyid] = public
    verification = verify_bundle(run_dir, trusted=trusted)
    if verification.verdict is Verdict.VERIFIED:
        raise ConfigError(f"{run_dir} is complete: nothing to resume")
    if verification.verdict is not Verdict.INCOMPLETE:
        failed = next((c for c in verification.checks if c.status is Status.FAIL), None)
        why = f"{failed.name}: {failed.reason}" if failed is not None else verification.advice
        raise ConfigError(
            f"cannot resume {run_dir}: its seal does not verify as an incomplete run "
            f"(verdict {verification.verdict.label}, {why}); nothing was changed: "
            "start a new run with another --out"
        )
    return ResumedFrom(
        bundle_digest=verification.bundle_digest,
        attestation_sha256=sha256_file(RunDir(run_dir).attestation_file),
        signer=verification.signer,
        carried_over=(),
    )


def resume_verifier(key: Path | None) -> ResumeVerifier:
    """verify_for_resume bound to the key the resumed run signs with."""
    return lambda run_dir: verify_for_resume(run_dir, key)
