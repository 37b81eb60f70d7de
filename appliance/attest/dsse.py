"""in-toto Statement v1 over a bundle's files, wrapped in a DSSE envelope signed with ed25519.

The statement's subjects are the bundle's files (relative path and sha256); its predicate is
this project's run predicate (docs/attestation.md). Keys come from `appliance keys init`: a
PKCS#8 PEM private key and the public key as a securesystemslib key dictionary, kept outside
any git checkout (default ~/.config/appliance/keys).
"""

import base64
import binascii
import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from securesystemslib.dsse import Envelope
from securesystemslib.formats import encode_canonical
from securesystemslib.signer import CryptoSigner, Key, Signer, SSlibKey

from appliance.core import atomic
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.paths import config_dir
from appliance.core.strict_load import parse_json, parse_json_bytes, read_bytes, read_text

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "urn:moe-appliance:predicate:run:v1"
PRIVATE_KEY_FILE = "appliance-ed25519.key"
PUBLIC_KEY_FILE = "appliance-ed25519.pub.json"
KEY_TYPE = "ed25519"
HEX_KEY = re.compile(r"[0-9a-f]{64}")
MAX_KEY_FILE_BYTES = 64 << 10  # a public key file is about 250 bytes
MAX_PAYLOAD_BYTES = 64 << 20


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path
    keyid: str


def default_key_dir() -> Path:
    """$XDG_CONFIG_HOME/appliance/keys, else ~/.config/appliance/keys."""
    return config_dir() / "keys"


def existing_default_key() -> Path | None:
    """The default key directory when `appliance keys init` has made a key there, else None."""
    directory = default_key_dir()
    return directory if (directory / PRIVATE_KEY_FILE).exists() else None


def _inside_git_checkout(path: Path) -> bool:
    probe = path
    while not probe.exists():
        probe = probe.parent
    result = subprocess.run(
        ["git", "-C", str(probe), "rev-parse", "--is-inside-work-tree"],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode == 0 and result.stdout.strip() == "true"


def init_keys(directory: Path | None = None, force: bool = False) -> KeyPair:
    """Make an ed25519 key pair in directory (private key mode 0600); refuse a git checkout."""
    directory = directory or default_key_dir()
    if _inside_git_checkout(directory):
        raise ApplianceError(
            f"{directory} is inside a git checkout: keep signing keys outside "
            "any repository (default ~/.config/appliance/keys)"
        )
    private, public = directory / PRIVATE_KEY_FILE, directory / PUBLIC_KEY_FILE
    if private.exists() and not force:
        raise ApplianceError(f"{private} already exists: pass --force to replace the key pair")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    signer = CryptoSigner.generate_ed25519()
    atomic.write_bytes(private, signer.private_bytes, mode=0o600)
    key = signer.public_key
    atomic.write_json(public, key_as_dict(key))
    return KeyPair(private=private, public=public, keyid=key.keyid)


def load_public_key(path: Path) -> SSlibKey:
    """A public key file written by init_keys (a directory means its public key file).

    The key id is recomputed from the key material; the file's `keyid` field is ignored.
    """
    if path.is_dir():
        path = path / PUBLIC_KEY_FILE
    text = read_text(path, MAX_KEY_FILE_BYTES, "public key not found (make one with `appliance keys init`)")
    try:
        data = parse_json(text, path)
    except ConfigError as exc:
        reason = str(exc).removeprefix(f"{path}: ")
        raise ConfigError(f"{path}: not an appliance public key file ({reason})") from None
    try:
        return public_key_from_dict(data)
    except ValueError as exc:
        raise ConfigError(f"{path}: not an appliance public key file ({exc})") from None


def key_id(keytype: str, scheme: str, keyval: dict[str, Any]) -> str:
    """securesystemslib's key id: sha256 of the canonical JSON of keytype, scheme and keyval."""
    canonical = encode_canonical({"keytype": keytype, "scheme": scheme, "keyval": keyval})
    assert isinstance(canonical, str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def public_key_from_dict(data: Any) -> SSlibKey:
    """An ed25519 public key from its securesystemslib dictionary, with its id recomputed.

    ValueError names the field that is wrong; a `keyid` in data is never used.
    """
    if not isinstance(data, dict):
        raise ValueError("a public key is a JSON object")
    keyval = data.get("keyval")
    if data.get("keytype") != KEY_TYPE or data.get("scheme") != KEY_TYPE:
        raise ValueError(f"keytype and scheme must be {KEY_TYPE!r}")
    if (
        not isinstance(keyval, dict)
        or set(keyval) != {"public"}
        or not isinstance(keyval["public"], str)
        or not HEX_KEY.fullmatch(keyval["public"])
    ):
        raise ValueError('keyval must be {"public": <64 lowercase hex digits>}')
    material = {"public": keyval["public"]}
    fields = {"keytype": KEY_TYPE, "scheme": KEY_TYPE, "keyval": material}
    return SSlibKey.from_dict(key_id(KEY_TYPE, KEY_TYPE, material), fields)


def key_as_dict(key: Key) -> dict[str, Any]:
    """The public key file's content: the securesystemslib dictionary and its key id."""
    return {"keyid": key.keyid, **key.to_dict()}


def load_signer(path: Path | None = None) -> Signer:
    """The signer for a private key file (or a key directory; default: default_key_dir())."""
    path = path or default_key_dir()
    private = path / PRIVATE_KEY_FILE if path.is_dir() else path
    public = private.with_name(PUBLIC_KEY_FILE)
    if not private.exists():
        raise ConfigError(f"{private}: no signing key (make one with `appliance keys init`)")
    key = load_public_key(public) if public.exists() else _public_half(private)
    return CryptoSigner.from_priv_key_uri(f"file2:{private.resolve()}", key)


def _public_half(private: Path) -> SSlibKey:
    """The public key of a private key file that has no public key file beside it (a release
    key kept as one secret)."""
    try:
        pem = read_bytes(private, MAX_KEY_FILE_BYTES, "no signing key (make one with `appliance keys init`)")
        secret = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{private}: not a PEM private key ({exc})") from None
    if not isinstance(secret, Ed25519PrivateKey):
        raise ConfigError(f"{private}: not an {KEY_TYPE} private key")
    raw = secret.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return public_key_from_dict({"keytype": KEY_TYPE, "scheme": KEY_TYPE, "keyval": {"public": raw.hex()}})


def make_statement(subjects: dict[str, str], predicate: dict[str, Any]) -> dict[str, Any]:
    """in-toto Statement v1: one subject per file (sorted by name), the run predicate."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": name, "digest": {"sha256": digest}} for name, digest in sorted(subjects.items())
        ],
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


@dataclass(frozen=True)
class ParsedEnvelope:
    """A DSSE envelope read strictly: decoded payload and (keyid hint, signature bytes) pairs."""

    payload: bytes
    payload_type: str
    signatures: list[tuple[str, bytes]]

    def pae(self) -> bytes:
        return pae(self.payload_type, self.payload)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what a signature covers."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise IntegrityError(f"attestation {what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise IntegrityError(f"attestation {what} is not valid base64") from None


def parse_envelope(data: Any) -> ParsedEnvelope:
    """The envelope's parts, or IntegrityError naming the first malformed field."""
    if not isinstance(data, dict) or set(data) != {"payload", "payloadType", "signatures"}:
        raise IntegrityError(
            "attestation is not a DSSE envelope (exactly payload, payloadType and signatures)"
        )
    if data["payloadType"] != PAYLOAD_TYPE:
        raise IntegrityError(
            f"attestation payload type is {data['payloadType']!r}, expected {PAYLOAD_TYPE!r}"
        )
    payload = _b64(data["payload"], "payload")
    if not isinstance(data["signatures"], list):
        raise IntegrityError("attestation signatures is not a list")
    signatures = []
    for index, entry in enumerate(data["signatures"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("keyid", ""), str):
            raise IntegrityError(f"attestation signature {index} is not {{keyid, sig}}")
        signatures.append((entry.get("keyid", ""), _b64(entry.get("sig"), f"signature {index}")))
    return ParsedEnvelope(payload, PAYLOAD_TYPE, signatures)


def read_statement(envelope: ParsedEnvelope) -> dict[str, Any]:
    """The in-toto Statement v1 inside an envelope; IntegrityError when it is not one."""
    try:
        statement = parse_json_bytes(envelope.payload, "attestation payload", MAX_PAYLOAD_BYTES)
    except ConfigError as exc:  # not JSON, not UTF-8, too deep, a duplicate key, a huge number
        raise IntegrityError(str(exc)) from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise IntegrityError(f"attestation payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    return statement


def read_envelope(data: Any) -> tuple[ParsedEnvelope, dict[str, Any]]:
    """The envelope and its decoded statement; IntegrityError when either is malformed."""
    envelope = parse_envelope(data)
    return envelope, read_statement(envelope)


def signed_by(envelope: ParsedEnvelope, key: SSlibKey) -> bool:
    """Whether any signature in the envelope is key's over the envelope's PAE.

    The signatures' keyid fields are hints anyone can write: every signature is tried.
    """
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(key.keyval["public"]))
    message = envelope.pae()
    for _, signature in envelope.signatures:
        try:
            public.verify(signature, message)
        except InvalidSignature:
            continue
        return True
    return False
