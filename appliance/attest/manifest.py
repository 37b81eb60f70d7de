"""manifest.json as a typed record: the one home of its keys, for the sealer and the verifier.

The sealer (`appliance.attest.bundle`) writes `Manifest(...).to_json()`; the verifier
(`appliance.attest.verify`) takes the exact key sets it demands from these classes. Importing
this module loads neither docker nor ray.
"""

from dataclasses import dataclass
from typing import Any, ClassVar

from appliance.core.records import Record

MANIFEST_VERSION = 1


@dataclass(frozen=True)
class FileEntry(Record):
    """One sealed file (`files[relative path]`): its sha256 and size."""

    sha256: str
    bytes: int


@dataclass(frozen=True)
class AttestationEntry(Record):
    """The attestation the manifest goes with: its file, sha256, whether it is signed and the
    signer's public key (null when unsigned; the key's own fields are securesystemslib's)."""

    WRITES_NULL: ClassVar[frozenset[str]] = frozenset({"public_key"})

    file: str
    sha256: str
    signed: bool
    public_key: dict[str, Any] | None


@dataclass(frozen=True)
class Manifest(Record):
    """manifest.json, keys in the order written."""

    manifest_version: int
    created_by: str
    run_status: str
    bundle_digest: str
    files: dict[str, FileEntry]
    attestation: AttestationEntry
