"""A bundle verifier written from docs/attestation.md alone: Python's standard library and
`cryptography`, nothing from the appliance. Usage:

    python independent_verifier.py BUNDLE_DIR PUBLIC_KEY.json

Exit 0 and print "accepted KEYID" when the bundle is sealed by that key and complete; else
print one problem per line and exit 1.
"""

import base64
import binascii
import hashlib
import json
import os
import posixpath
import stat
import sys
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:moe-appliance:predicate:run:v1"
SEALS = {"manifest.json", "attestation.dsse.json"}
DERIVED = {"report.html"}  # a regular file by this name is derived, never sealed


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def key_id(key: dict[str, Any]) -> str:
    return hashlib.sha256(
        canonical({"keytype": key["keytype"], "scheme": key["scheme"], "keyval": key["keyval"]})
    ).hexdigest()


def pae(payload_type: str, payload: bytes) -> bytes:
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def walk(root: Path) -> tuple[dict[str, Path], list[str]]:
    """Regular files below root (relative POSIX names) and every entry that is not a regular
    file or a directory; nothing is followed or opened."""
    files: dict[str, Path] = {}
    others: list[str] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        for entry in os.scandir(directory):
            mode = entry.stat(follow_symlinks=False).st_mode
            rel = Path(entry.path).relative_to(root).as_posix()
            if stat.S_ISDIR(mode):
                pending.append(Path(entry.path))
            elif stat.S_ISREG(mode):
                if rel not in SEALS and rel not in DERIVED:
                    files[rel] = Path(entry.path)
            else:
                others.append(rel)
    return files, others


def verify(bundle: Path, public_key_file: Path) -> tuple[list[str], str]:
    """(problems, key id); no problems means accepted."""
    key = json.loads(public_key_file.read_text())
    keyid = key_id(key)
    if key["keytype"] != "ed25519" or key["scheme"] != "ed25519":
        return [f"unsupported key type {key['keytype']}"], keyid
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(key["keyval"]["public"]))

    envelope = json.loads((bundle / "attestation.dsse.json").read_text())
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        return [f"payloadType {envelope.get('payloadType')!r}"], keyid
    try:
        payload = base64.b64decode(envelope["payload"], validate=True)
        signatures = [base64.b64decode(s["sig"], validate=True) for s in envelope["signatures"]]
    except (binascii.Error, KeyError, TypeError):
        return ["envelope fields are not base64"], keyid
    message = pae(PAYLOAD_TYPE, payload)
    valid = False
    for signature in signatures:
        try:
            public.verify(signature, message)
            valid = True
        except InvalidSignature:
            continue
    if not valid:
        return [f"no signature by {keyid}"], keyid

    statement = json.loads(payload)
    problems = []
    if statement.get("_type") != STATEMENT_TYPE or statement.get("predicateType") != PREDICATE_TYPE:
        problems.append("not a run Statement v1")
    subjects: dict[str, str] = {}
    for subject in statement["subject"]:
        name, digest = subject["name"], subject["digest"]["sha256"]
        if (
            name in subjects
            or name.startswith("/")
            or posixpath.normpath(name) != name
            or ".." in name.split("/")
            or name in SEALS
            or name in DERIVED
        ):
            problems.append(f"bad or repeated subject name {name!r}")
        subjects[name] = digest

    files, others = walk(bundle)
    problems += [f"not a regular file: {rel}" for rel in sorted(others)]
    if set(files) != set(subjects):
        problems.append(f"files and subjects differ: {sorted(set(files) ^ set(subjects))}")
    for name in sorted(set(files) & set(subjects)):
        if sha256_file(files[name]) != subjects[name]:
            problems.append(f"digest differs: {name}")

    predicate = statement["predicate"]
    if predicate["bundle_digest"] != hashlib.sha256(canonical(subjects)).hexdigest():
        problems.append("bundle digest differs")
    if "provenance.json" not in files or canonical(
        json.loads(files["provenance.json"].read_bytes())
    ) != canonical(predicate["provenance"]):
        problems.append("provenance.json differs from the signed provenance")
    run = json.loads(files["run.json"].read_bytes()) if "run.json" in files else {}
    if not run.get("status") == predicate["run"]["status"] == "complete":
        problems.append(
            f"run status {run.get('status')!r}, signed {predicate['run']['status']!r}: not a complete run"
        )
    return problems, keyid


def main() -> int:
    problems, keyid = verify(Path(sys.argv[1]), Path(sys.argv[2]))
    for problem in problems:
        print(problem)
    if not problems:
        print(f"accepted {keyid}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
