"""Published engine images: the release's signed record of each, kept in the lock, and what a
pull checks against it before and after anything is downloaded.

A release pushes a target's image by digest and writes, under the lock's
`published_images.TARGET`, the reference and a record: a DSSE envelope of an in-toto statement
whose subject is the image's manifest digest and whose predicate holds the image ID, its labels,
the lock digest and the bytes a pull transfers, signed by a key the lock pins in `release_keys`.
The registry keeps the same record beside the image (a one-file image tagged
`sha256-<hex>.record`, `record_reference`), so it travels with what was published.

`pull_published` refuses, each in one line and before pulling, a record that is missing,
unsigned, signed by a key the lock does not pin, altered after signing, made for another
digest, target or lock; then a registry that lacks the digest, answers another one or does not
answer in time. After the pull it refuses (and removes) an image whose ID or labels differ from
the record's or whose labels do not match the lock. Only then is the image tagged locally.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import Signer, SSlibKey

from appliance.attest.dsse import (
    STATEMENT_TYPE,
    envelope_for,
    key_as_dict,
    load_public_key,
    public_key_from_dict,
    read_envelope,
    signed_by,
)
from appliance.core.checks import one_line
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.engine.lock import Lock, write_lock
from appliance.host.docker import docker_client
from appliance.images import labels as L
from appliance.images.inspection import InspectReport, drift_message, inspect_labels
from appliance.images.registry import (
    DIGEST_REF_RE,
    docker_pull,
    published_reference,
    push_image,
    push_record,
    tag_as_local,
)
from appliance.images.registry_api import REGISTRY_TIMEOUT_S, RemoteManifest, remote_manifest

RECORD_PREDICATE = "urn:moe-appliance:predicate:published-image:v1"
PIN_HINT = "pin the release key with `appliance image pin-key PUBLIC_KEY`"


@dataclass(frozen=True)
class ImageRecord:
    """What a release vouches for about one pushed image."""

    target: str
    reference: str  # REGISTRY/REPO@sha256:...
    image_id: str
    labels: dict[str, str]
    lock_digest: str
    transfer_bytes: int
    signed_by: str = ""

    @property
    def digest(self) -> str:
        return self.reference.partition("@")[2]

    def statement(self) -> dict[str, Any]:
        repository, _, digest = self.reference.partition("@")
        return {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}],
            "predicateType": RECORD_PREDICATE,
            "predicate": {
                "target": self.target,
                "image_id": self.image_id,
                "labels": self.labels,
                "lock_digest": self.lock_digest,
                "transfer_bytes": self.transfer_bytes,
            },
        }


def pinned_release_keys(lock: Lock) -> dict[str, SSlibKey]:
    """key id -> key of the lock's `release_keys`; a key filed under another id is refused."""
    keys = {}
    for named, data in lock.release_keys.items():
        try:
            key = public_key_from_dict(data)
        except ValueError as exc:
            raise ConfigError(f"{lock.path}: release_keys.{named}: not a public key ({exc})") from None
        if key.keyid != named:
            raise ConfigError(
                f"{lock.path}: release_keys.{named}: the key's id is {key.keyid}: file it under its own id"
            )
        keys[named] = key
    return keys


def pin_release_key(lock: Lock, public_key: Path) -> str:
    """Pin the public key in `public_key` (a .pub.json file or key directory) in the lock."""
    key = load_public_key(public_key)
    raw = dict(lock.raw)
    pinned = dict(raw.get("release_keys") or {})
    pinned[key.keyid] = {k: v for k, v in key_as_dict(key).items() if k != "keyid"}
    raw["release_keys"] = pinned
    write_lock(raw, lock.path)
    return str(key.keyid)


def publish_image(
    lock: Lock, target: str, registry: str, signer: Signer, image_ref: str | None = None
) -> dict[str, Any]:
    """Push TARGET's image, sign its record with a pinned release key and write both to the
    lock's `published_images`; the lock entry. A key the lock does not pin is refused first."""
    keyid = signer.public_key.keyid
    if keyid not in pinned_release_keys(lock):
        raise ConfigError(f"signing key {keyid} is not pinned in {lock.path} (release_keys): {PIN_HINT}")
    pushed = push_image(lock, target, registry, image_ref)
    remote = remote_manifest(pushed.reference)
    labels = dict(docker_client().images.get(pushed.image_id).labels or {})
    record = ImageRecord(
        target, pushed.reference, pushed.image_id, labels, lock.digest, remote.transfer_bytes
    )
    envelope = envelope_for(record.statement(), signer)
    entry = {
        "reference": pushed.reference,
        "tag": pushed.tag,
        "lock_digest": lock.digest,
        "source": labels.get(L.SOURCE_NAME, ""),
        "image_id": pushed.image_id,
        "transfer_bytes": remote.transfer_bytes,
        "record": envelope,
        "record_reference": push_record(docker_client(), pushed.reference, envelope, registry),
    }
    raw = dict(lock.raw)
    raw["published_images"] = {**(raw.get("published_images") or {}), target: entry}
    write_lock(raw, lock.path)
    return entry


def verified_record(lock: Lock, target: str) -> ImageRecord:
    """The lock's record of TARGET's published image, checked without the network."""
    reference = published_reference(lock, target)
    where = f"{lock.path}: published_images.{target}"
    entry = lock.published_images[target]
    envelope_data = entry.get("record") if isinstance(entry, dict) else None
    if not envelope_data:
        raise IntegrityError(f"{where} has no signed record: refused (pull only images a release signed)")
    try:
        envelope, statement = read_envelope(envelope_data)
    except IntegrityError as exc:
        raise IntegrityError(f"{where}: record is malformed ({exc}): refused") from None
    if not envelope.signatures:
        raise IntegrityError(f"{where}: record is unsigned: refused")
    keys = pinned_release_keys(lock)
    if not keys:
        raise ConfigError(f"{lock.path} pins no release key, so no record can be checked: {PIN_HINT}")
    signer = next((keyid for keyid, key in keys.items() if signed_by(envelope, key)), None)
    if signer is None:
        hints = sorted({one_line(hint) for hint, _ in envelope.signatures})
        pinned = [hint for hint in hints if hint in keys]
        why = (
            f"its signature by {pinned[0]} does not match its contents (altered after signing)"
            if pinned
            else f"it is signed by {', '.join(hints) or 'an unnamed key'}, which the lock does not pin"
        )
        raise IntegrityError(f"{where}: {why}: refused")
    record = _record_of(statement, where)
    if record.reference != reference:
        raise IntegrityError(
            f"{where}: the signed record is for {record.reference}, the lock names {reference}: refused"
        )
    if record.target != target:
        raise IntegrityError(f"{where}: the signed record is for target {record.target}: refused")
    if record.lock_digest != lock.digest:
        raise IntegrityError(
            f"{where}: the signed record was made for lock {record.lock_digest[:12]}, this lock is "
            f"{lock.digest[:12]}: refused"
        )
    return ImageRecord(**{**record.__dict__, "signed_by": signer})


def _record_of(statement: dict[str, Any], where: str) -> ImageRecord:
    try:
        (subject,) = statement["subject"]
        predicate = statement["predicate"]
        if statement["predicateType"] != RECORD_PREDICATE:
            raise ValueError(f"predicate type {statement['predicateType']!r}")
        record = ImageRecord(
            target=str(predicate["target"]),
            reference=f"{subject['name']}@sha256:{subject['digest']['sha256']}",
            image_id=str(predicate["image_id"]),
            labels={str(k): str(v) for k, v in dict(predicate["labels"]).items()},
            lock_digest=str(predicate["lock_digest"]),
            transfer_bytes=int(predicate["transfer_bytes"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise IntegrityError(
            f"{where}: record is not a published-image statement ({one_line(str(exc))})"
        ) from None
    if not DIGEST_REF_RE.match(record.reference):
        raise IntegrityError(f"{where}: record's subject is not a digest reference")
    return record


def pull_published(lock: Lock, target: str, timeout: float = REGISTRY_TIMEOUT_S) -> InspectReport:
    """Pull TARGET's published image after its record and the registry's manifest check out;
    keep it (tagged as a local build would be) only if it is the image the record vouches for."""
    record = verified_record(lock, target)
    remote_manifest(record.reference, timeout)
    client = docker_client()
    image = docker_pull(client, record.reference)

    def refuse(message: str) -> IntegrityError:
        client.images.remove(record.reference, force=True)
        return IntegrityError(f"{message}; pulled {record.reference} refused and removed")

    labels = dict(image.labels or {})
    if image.id != record.image_id:
        raise refuse(f"the pulled image is {image.id}, the signed record names {record.image_id}")
    if labels != record.labels:
        changed = sorted(k for k in set(labels) | set(record.labels) if labels.get(k) != record.labels.get(k))
        raise refuse(f"the pulled image's labels differ from the signed record's ({', '.join(changed)})")
    report = inspect_labels(lock, record.reference, labels, image.id, int(image.attrs.get("Size", 0)))
    if labels.get(L.TARGET) != target:
        report.drifts.append(L.Drift(L.TARGET, labels.get(L.TARGET), target, "an image for another target"))
    if not report.matches:
        raise refuse(drift_message(report))
    report.ref = tag_as_local(lock, target, image, report)
    return report


@dataclass(frozen=True)
class PullPreview:
    """What `appliance pull --dry-run` shows before a download."""

    record: ImageRecord
    remote: RemoteManifest | None
    registry_problem: str

    def facts(self) -> dict[str, Any]:
        labels = self.record.labels
        return {
            "target": self.record.target,
            "reference": self.record.reference,
            "digest": self.record.digest,
            "image_id": self.record.image_id,
            "transfer_bytes": self.remote.transfer_bytes if self.remote else self.record.transfer_bytes,
            "transfer_bytes_from": "registry" if self.remote else "signed record",
            "registry_problem": self.registry_problem or None,
            "source": labels.get(L.SOURCE_NAME) or None,
            "cuda_version": labels.get(L.CUDA_VERSION) or None,
            "cuda_sass": labels.get(L.CUDA_SASS) or None,
            "cuda_ptx": labels.get(L.CUDA_PTX) or None,
            "min_driver": labels.get(L.MIN_DRIVER) or None,
            "signed_by": self.record.signed_by,
        }


def preview_pull(lock: Lock, target: str, timeout: float = REGISTRY_TIMEOUT_S) -> PullPreview:
    """The checked record and, when the registry answers, its manifest; nothing is pulled."""
    record = verified_record(lock, target)
    try:
        return PullPreview(record, remote_manifest(record.reference, timeout), "")
    except IntegrityError:
        raise
    except ApplianceError as exc:
        return PullPreview(record, None, str(exc))
