"""in-toto Statement v1 over a bundle's files, wrapped in a DSSE envelope signed with ed25519.

The statement's subjects are the bundle's files (relative path and sha256); its predicate is
this project's run predicate (docs/attestation.md). Keys come from `appliance keys init`: a
PKCS#8 PEM private key and the public key as a securesystemslib key dictionary, kept outside
any git checkout (default ~/.config/appliance/keys).
"""

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import CryptoSigner, Signer, SSlibKey

from appliance.core import atomic
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "urn:moe-appliance:predicate:run:v1"
PRIVATE_KEY_FILE = "appliance-ed25519.key"
PUBLIC_KEY_FILE = "appliance-ed25519.pub.json"


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path
    keyid: str


def default_key_dir() -> Path:
    """$XDG_CONFIG_HOME/appliance/keys, else ~/.config/appliance/keys."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "appliance" / "keys"


def existing_default_key() -> Path | None:
    """The default key directory when `appliance keys init` has made a key there, else None."""
    directory = default_key_dir()
    return directory if (directory / PRIVATE_KEY_FILE).exists() else None


def _inside_git_checkout(path: Path) -> bool:
    probe = path
    while not probe.exists():
        probe = probe.parent
    result = subprocess.run(["git", "-C", str(probe), "rev-parse", "--is-inside-work-tree"],
                            capture_output=True, text=True, check=False)
    return result.returncode == 0 and result.stdout.strip() == "true"


def init_keys(directory: Path | None = None, force: bool = False) -> KeyPair:
    """Make an ed25519 key pair in directory (private key mode 0600); refuse a git checkout."""
    directory = directory or default_key_dir()
    if _inside_git_checkout(directory):
        raise ApplianceError(f"{directory} is inside a git checkout: keep signing keys outside "
                             "any repository (default ~/.config/appliance/keys)")
    private, public = directory / PRIVATE_KEY_FILE, directory / PUBLIC_KEY_FILE
    if private.exists() and not force:
        raise ApplianceError(f"{private} already exists: pass --force to replace the key pair")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    signer = CryptoSigner.generate_ed25519()
    atomic.write_bytes(private, signer.private_bytes, mode=0o600)
    key = signer.public_key
    atomic.write_json(public, {"keyid": key.keyid, **key.to_dict()}, sort_keys=False)
    return KeyPair(private=private, public=public, keyid=key.keyid)


def load_public_key(path: Path) -> SSlibKey:
    """A public key file written by init_keys (a directory means its public key file)."""
    if path.is_dir():
        path = path / PUBLIC_KEY_FILE
    try:
        data = json.loads(path.read_text())
        return public_key_from_dict(data)
    except FileNotFoundError:
        raise ConfigError(f"{path}: public key not found "
                          "(make one with `appliance keys init`)") from None
    except (json.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not an appliance public key file ({exc})") from None


def public_key_from_dict(data: dict[str, Any]) -> SSlibKey:
    fields = {k: v for k, v in data.items() if k != "keyid"}
    return SSlibKey.from_dict(data["keyid"], fields)


def load_signer(path: Path | None = None) -> Signer:
    """The signer for a private key file (or a key directory; default: default_key_dir())."""
    path = path or default_key_dir()
    private = path / PRIVATE_KEY_FILE if path.is_dir() else path
    public = private.with_name(PUBLIC_KEY_FILE)
    if not private.exists():
        raise ConfigError(f"{private}: no signing key (make one with `appliance keys init`)")
    key = load_public_key(public)
    return CryptoSigner.from_priv_key_uri(f"file2:{private.resolve()}", key)


def make_statement(subjects: dict[str, str], predicate: dict[str, Any]) -> dict[str, Any]:
    """in-toto Statement v1: one subject per file (sorted by name), the run predicate."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest}}
                    for name, digest in sorted(subjects.items())],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def envelope_for(statement: dict[str, Any], signer: Signer | None) -> dict[str, Any]:
    """The DSSE envelope (as JSON) of statement, signed by signer or with no signatures."""
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    if signer is not None:
        envelope.sign(signer)
    result: dict[str, Any] = envelope.to_dict()
    return result


def read_envelope(data: dict[str, Any]) -> tuple[Envelope, dict[str, Any]]:
    """The envelope and its decoded statement; IntegrityError when either is malformed."""
    try:
        envelope = Envelope.from_dict(json.loads(json.dumps(data)))
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise IntegrityError(f"attestation is not a DSSE envelope: {exc}") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise IntegrityError(f"attestation payload type is {envelope.payload_type!r}, "
                             f"expected {PAYLOAD_TYPE!r}")
    try:
        statement = json.loads(envelope.payload)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep
        raise IntegrityError(f"attestation payload is not JSON: {exc}") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise IntegrityError(f"attestation payload is not an in-toto Statement v1 "
                             f"({STATEMENT_TYPE})")
    return envelope, statement


def verify_envelope(envelope: Envelope, key: SSlibKey) -> None:
    """Raise IntegrityError unless key made a valid signature over the envelope."""
    if not envelope.signatures:
        raise IntegrityError("the attestation carries no signature")
    signed_by = sorted(str(keyid) for keyid in envelope.signatures)
    if key.keyid not in envelope.signatures:
        raise IntegrityError(f"signed by key {', '.join(signed_by)}, "
                             f"not by the given key {key.keyid}")
    try:
        envelope.verify([key], 1)
    except (VerificationError, AttributeError, TypeError, ValueError):  # malformed signatures
        raise IntegrityError(f"signature by key {key.keyid} does not match the statement") from None
