"""The tamper battery: every way a sealed bundle can be altered, and the verdict each must get.

Shared by the unit battery (bundles from tests/fake_run.py) and the acceptance battery (a
bundle from a real cpu-engine run). Each case alters a fresh copy of a genuine bundle sealed by
the trusted key; `bundle verify` (no --key, the sealing key in the trust store) must refuse it
with the given verdict, name the given check in its one-line verdict, and modify nothing.
"""

import base64
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import KeyPair, envelope_for, load_signer
from appliance.attest.verify import CheckName, Verdict, Verification
from appliance.core.checks import Check
from appliance.runs.run_dir import ATTESTATION_FILE, MANIFEST_FILE


@dataclass(frozen=True)
class Keys:
    trusted: KeyPair
    untrusted: KeyPair


def check_named(result: Verification, name: CheckName) -> Check:
    """The check of that name in a verification."""
    return next(c for c in result.checks if c.name == name)


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry below root: kind and content digest (link target for links); FIFOs and
    other special files are recorded by kind without being opened."""
    entries: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            path = Path(dirpath) / name
            mode = os.lstat(path).st_mode
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                entries[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                entries[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            elif not stat.S_ISDIR(mode):
                entries[rel] = ("special", oct(stat.S_IFMT(mode)))
    return entries


def _envelope(run: Path) -> dict[str, Any]:
    envelope: dict[str, Any] = json.loads((run / ATTESTATION_FILE).read_text())
    return envelope


def _statement(run: Path) -> dict[str, Any]:
    statement: dict[str, Any] = json.loads(base64.b64decode(_envelope(run)["payload"]))
    return statement


def _write_envelope(run: Path, envelope: dict[str, Any]) -> None:
    """Replace the attestation and record its new sha256 in the manifest, as a careful
    attacker would, so that only the check under test can catch the change."""
    data = (json.dumps(envelope, indent=2) + "\n").encode()
    (run / ATTESTATION_FILE).write_bytes(data)
    _edit_manifest(run, lambda m: m["attestation"].update(sha256=hashlib.sha256(data).hexdigest()))


def _edit_manifest(run: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    edit(manifest)
    (run / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")


def sign_statement(run: Path, statement: dict[str, Any], key: KeyPair) -> None:
    _write_envelope(run, envelope_for(statement, load_signer(key.private)))


def _flip_byte(run: Path, keys: Keys) -> None:
    path = run / "results.json"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _add_file(run: Path, keys: Keys) -> None:
    (run / "trials" / "extra.txt").write_text("sneaked in\n")


def _remove_file(run: Path, keys: Keys) -> None:
    (run / "inputs" / "schedule.json").unlink()


def _rename_file(run: Path, keys: Keys) -> None:
    (run / "results.json").rename(run / "results-renamed.json")


def _edit_statement(run: Path, keys: Keys) -> None:
    envelope = _envelope(run)
    statement = _statement(run)
    statement["predicate"]["run"]["profile"] = "something-else"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    _write_envelope(run, envelope)


def _reseal_untrusted(run: Path, keys: Keys) -> None:
    _flip_byte(run, keys)
    finalize_bundle(run, keys.untrusted.private)


def _reseal_untrusted_claiming_trusted_id(run: Path, keys: Keys) -> None:
    _reseal_untrusted(run, keys)
    envelope = _envelope(run)
    for signature in envelope["signatures"]:
        signature["keyid"] = keys.trusted.keyid
    _write_envelope(run, envelope)
    _edit_manifest(run, lambda m: m["attestation"]["public_key"].update(keyid=keys.trusted.keyid))


def _strip_signature(run: Path, keys: Keys) -> None:
    envelope = _envelope(run)
    envelope["signatures"] = []
    _write_envelope(run, envelope)
    _edit_manifest(run, lambda m: m["attestation"].update(signed=False, public_key=None))


def _truncate_signature(run: Path, keys: Keys) -> None:
    envelope = _envelope(run)
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    envelope["signatures"][0]["sig"] = base64.b64encode(signature[:-8]).decode()
    _write_envelope(run, envelope)


def _change_payload_type(run: Path, keys: Keys) -> None:
    envelope = _envelope(run)
    envelope["payloadType"] = "application/json"
    _write_envelope(run, envelope)


def other_bundle_envelope(other: Path) -> Callable[[Path, Keys], None]:
    """The attestation of another genuine bundle (same trusted signer) moved into this one."""

    def tamper(run: Path, keys: Keys) -> None:
        _write_envelope(run, _envelope(other))

    return tamper


def _symlink_for_file(run: Path, keys: Keys) -> None:
    target = run / "results.json"
    copy = run.parent / f"{run.name}-results.json"
    shutil.copy(target, copy)
    target.unlink()
    target.symlink_to(copy)


def _add_fifo(run: Path, keys: Keys) -> None:
    os.mkfifo(run / "trials" / "pipe")


def _duplicate_subject(run: Path, keys: Keys) -> None:
    statement = _statement(run)
    first = statement["subject"][0]
    statement["subject"].insert(0, {"name": first["name"], "digest": {"sha256": "0" * 64}})
    sign_statement(run, statement, keys.trusted)


def _provenance_differs(run: Path, keys: Keys) -> None:
    statement = _statement(run)
    statement["predicate"]["provenance"]["host"]["kernel"] = "0.0.0-not-this-one"
    sign_statement(run, statement, keys.trusted)


def _incomplete_marked_complete(run: Path, keys: Keys) -> None:
    record = json.loads((run / "run.json").read_text())
    record["status"] = "incomplete"
    (run / "run.json").write_text(json.dumps(record, indent=2))
    finalize_bundle(run, keys.trusted.private)  # a genuine, signed incomplete run ...
    record["status"] = "complete"  # ... relabelled complete, manifest too
    (run / "run.json").write_text(json.dumps(record, indent=2))
    _edit_manifest(run, lambda m: m.update(run_status="complete"))


@dataclass(frozen=True)
class Case:
    name: str
    tamper: Callable[[Path, Keys], None]
    verdict: Verdict
    check: CheckName


def cases(other: Path) -> list[Case]:
    """Every tamper case; other is another genuine bundle sealed by the trusted key."""
    return [
        Case("byte-flipped", _flip_byte, Verdict.TAMPERED, CheckName.FILE_DIGESTS),
        Case("file-added", _add_file, Verdict.TAMPERED, CheckName.SUBJECTS_COVER_FILES),
        Case("file-removed", _remove_file, Verdict.TAMPERED, CheckName.SUBJECTS_COVER_FILES),
        Case("file-renamed", _rename_file, Verdict.TAMPERED, CheckName.SUBJECTS_COVER_FILES),
        Case("statement-edited", _edit_statement, Verdict.TAMPERED, CheckName.SIGNATURE),
        Case("resealed-untrusted", _reseal_untrusted, Verdict.UNTRUSTED, CheckName.SIGNATURE),
        Case(
            "resealed-untrusted-with-trusted-id",
            _reseal_untrusted_claiming_trusted_id,
            Verdict.UNTRUSTED,
            CheckName.SIGNATURE,
        ),
        Case("signature-stripped", _strip_signature, Verdict.UNSIGNED, CheckName.SIGNATURE),
        Case("signature-truncated", _truncate_signature, Verdict.TAMPERED, CheckName.SIGNATURE),
        Case("payload-type-changed", _change_payload_type, Verdict.TAMPERED, CheckName.ATTESTATION),
        Case(
            "another-bundles-envelope", other_bundle_envelope(other), Verdict.TAMPERED, CheckName.FILE_DIGESTS
        ),
        Case("symlink-for-file", _symlink_for_file, Verdict.TAMPERED, CheckName.PLAIN_FILES),
        Case("fifo-added", _add_fifo, Verdict.TAMPERED, CheckName.PLAIN_FILES),
        Case("subject-twice", _duplicate_subject, Verdict.TAMPERED, CheckName.SUBJECT_NAMES),
        Case("provenance-differs", _provenance_differs, Verdict.TAMPERED, CheckName.PROVENANCE),
        Case(
            "incomplete-marked-complete", _incomplete_marked_complete, Verdict.TAMPERED, CheckName.RUN_STATUS
        ),
    ]


def another_genuine_bundle(genuine: Path, where: Path, keys: Keys) -> Path:
    """A copy of genuine with different results, sealed by the trusted key."""
    other = where / "other-bundle"
    shutil.copytree(genuine, other, symlinks=True)
    results = json.loads((other / "results.json").read_text())
    results["note"] = "another run"
    (other / "results.json").write_text(json.dumps(results))
    finalize_bundle(other, keys.trusted.private)
    return other
