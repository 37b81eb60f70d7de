"""Engine images without a registry: a docker archive plus a small signed sidecar, and back.

`export_image` saves a local engine image that matches the lock as a docker archive (saved by
image ID, so loading it tags nothing) and writes `<archive>.sidecar.json` beside it: a DSSE
envelope, signed by the exporting key, over the image ID, its labels, the lock digest, the
archive's sha256 and size, and the exporting key id.

`load_image_archive` takes a sidecar only after `verify` (a caller-chosen check of the
signature: `verify_sidecar` against one key, or a trust store) accepts it, refuses a sidecar
made for another lock or target and an archive whose sha256 differs, before loading anything;
after `docker load` it refuses an image whose ID or labels differ from the sidecar's or whose
labels do not match the lock, removing what it loaded. Only then is the image tagged.
"""

import copy
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError

from appliance.core import atomic
from appliance.core.checks import one_line
from appliance.core.digests import sha256_file
from appliance.core.errors import ConfigError, IntegrityError
from appliance.core.progress import ProgressFn, byte_counter
from appliance.core.strict_load import open_regular, parse_json, parse_json_bytes, read_text
from appliance.engine.lock import Lock
from appliance.host.docker import docker_client
from appliance.images import labels as L
from appliance.images.inspection import InspectReport, drift_message, inspect_labels
from appliance.images.registry import matching_local_image

SIDECAR_SUFFIX = ".sidecar.json"
PAYLOAD_TYPE = "application/vnd.moe-appliance.image-export+json"
SCHEMA = "urn:moe-appliance:image-export:v1"
CHUNK = 1 << 20
MAX_SIDECAR_BYTES = 1 << 20  # an image's labels and a signature: a few KiB


@dataclass(frozen=True)
class Sidecar:
    """What a sidecar vouches for, and the envelope that carries it."""

    target: str
    tag: str
    image_id: str
    labels: dict[str, str]
    lock_digest: str
    archive_sha256: str
    archive_bytes: int
    keyid: str
    envelope: dict[str, Any]

    def record(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "target": self.target,
            "tag": self.tag,
            "image_id": self.image_id,
            "labels": self.labels,
            "lock_digest": self.lock_digest,
            "archive": {"sha256": self.archive_sha256, "bytes": self.archive_bytes},
            "exported_by": self.keyid,
        }


def sidecar_path(archive: Path) -> Path:
    return archive.with_name(archive.name + SIDECAR_SUFFIX)


def sign_sidecar(record: dict[str, Any], signer: Any) -> dict[str, Any]:
    """The DSSE envelope (as JSON) of a sidecar record, signed by `signer`."""
    payload = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(signer)
    result: dict[str, Any] = envelope.to_dict()
    return result


def read_sidecar(path: Path) -> Sidecar:
    """The sidecar at `path`; one-line errors for a missing or malformed file."""
    text = read_text(
        path, MAX_SIDECAR_BYTES, "no sidecar (it is written beside the archive by `appliance image export`)"
    )
    try:
        data = parse_json(text, path)
        envelope = Envelope.from_dict(copy.deepcopy(data))  # from_dict changes what it is given
    except ConfigError as exc:
        raise IntegrityError(f"{path}: not a DSSE envelope ({str(exc).removeprefix(f'{path}: ')})") from None
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise IntegrityError(f"{path}: not a DSSE envelope ({one_line(str(exc))})") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise IntegrityError(
            f"{path}: payload type {one_line(repr(envelope.payload_type))} is not an image export sidecar"
        )
    try:
        record = parse_json_bytes(envelope.payload, f"{path}: payload", MAX_SIDECAR_BYTES)
        archive = record["archive"]
        sidecar = Sidecar(
            record["target"],
            record["tag"],
            record["image_id"],
            dict(record["labels"]),
            record["lock_digest"],
            archive["sha256"],
            int(archive["bytes"]),
            record["exported_by"],
            dict(data),
        )
    except ConfigError as exc:
        reason = str(exc).removeprefix(f"{path}: payload: ")
        raise IntegrityError(f"{path}: malformed sidecar payload ({reason})") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise IntegrityError(f"{path}: malformed sidecar payload ({one_line(repr(exc))})") from None
    if record.get("schema") != SCHEMA:
        raise IntegrityError(f"{path}: schema {one_line(repr(record.get('schema')))}, expected {SCHEMA}")
    texts = {
        "target": sidecar.target,
        "tag": sidecar.tag,
        "image_id": sidecar.image_id,
        "lock_digest": sidecar.lock_digest,
        "archive.sha256": sidecar.archive_sha256,
        "exported_by": sidecar.keyid,
        **{f"labels/{k}": v for k, v in sidecar.labels.items()},
    }
    wrong = [name for name, value in texts.items() if not isinstance(value, str)]
    if wrong or isinstance(record["archive"]["bytes"], bool) or sidecar.archive_bytes < 0:
        what = one_line(wrong[0]) if wrong else "archive.bytes"
        raise IntegrityError(f"{path}: malformed sidecar payload ({what} has the wrong type or value)")
    return sidecar


def verify_sidecar(sidecar: Sidecar, key: Any) -> None:
    """Raise IntegrityError unless `key` (a securesystemslib public key) signed the sidecar.

    A trust store verifies by looking up `sidecar.keyid` and calling this with that key."""
    try:
        envelope = Envelope.from_dict(copy.deepcopy(sidecar.envelope))
    except (KeyError, ValueError, TypeError) as exc:
        raise IntegrityError(f"sidecar envelope is malformed ({exc}): refused, nothing loaded") from None
    signed_by = sorted(one_line(str(keyid)) for keyid in envelope.signatures)
    if key.keyid not in envelope.signatures:
        raise IntegrityError(
            f"sidecar signed by key {', '.join(signed_by) or 'nobody'}, not by "
            f"the given key {key.keyid}: refused, nothing loaded"
        )
    if sidecar.keyid != key.keyid:
        raise IntegrityError(
            f"sidecar names exporting key {sidecar.keyid} but is signed by "
            f"{key.keyid}: refused, nothing loaded"
        )
    try:
        envelope.verify([key], 1)
    except VerificationError:
        raise IntegrityError(
            f"sidecar signature by key {key.keyid} does not match its contents: refused, nothing loaded"
        ) from None


def archive_sha256(path: Path, progress: ProgressFn | None) -> str:
    return sha256_file(path, byte_counter(f"sha256 {path.name}", path.stat().st_size, progress))


def check_export_paths(out: Path, force: bool) -> None:
    """Refuse, before anything is written, an archive or sidecar that exists (unless `force`)
    and a directory that does not: an export never overwrites or makes directories unasked."""
    parent = out.parent
    if not parent.is_dir():
        raise ConfigError(
            f"{out}: the directory {parent} does not exist: make it first, or choose another file"
        )
    if not force:
        for path in (out, sidecar_path(out)):
            if path.exists() or path.is_symlink():
                raise ConfigError(
                    f"{path} already exists: pass --force to replace it, or choose another file"
                )


def export_image(
    lock: Lock,
    target: str,
    out: Path,
    signer: Any,
    image_ref: str | None = None,
    progress: ProgressFn | None = None,
    force: bool = False,
) -> Sidecar:
    """Write TARGET's local image (or `image_ref`) to `out` and its signed sidecar beside it;
    an existing FILE (or sidecar) is replaced only with `force` (check_export_paths)."""
    check_export_paths(out, force)
    client, ref, report = matching_local_image(lock, target, image_ref, "export")
    if report.labels.get(L.TARGET) != target:
        raise IntegrityError(
            f"{ref} is an image for {report.labels.get(L.TARGET)}, not {target}: refusing to export it"
        )
    image = client.images.get(ref)
    digest = hashlib.sha256()
    written = byte_counter(f"saving {ref}", None, progress)
    size = 0
    with atomic.replacing(out) as handle:
        for chunk in image.save(named=False):  # by ID: loading it tags nothing
            handle.write(chunk)
            digest.update(chunk)
            size += len(chunk)
            written(len(chunk))
        sidecar = Sidecar(
            target,
            ref,
            image.id,
            dict(image.labels or {}),
            lock.digest,
            digest.hexdigest(),
            size,
            signer.public_key.keyid,
            {},
        )
        envelope = sign_sidecar(sidecar.record(), signer)
    atomic.write_json(sidecar_path(out), envelope)
    return Sidecar(**{**sidecar.__dict__, "envelope": envelope})


def _loaded_ids(stream: Any) -> list[str]:
    ids = []
    for chunk in stream:
        if "error" in chunk:
            raise IntegrityError(f"docker load refused the archive: {chunk['error']}")
        text = str(chunk.get("stream", ""))
        for prefix in ("Loaded image ID: ", "Loaded image: "):
            if text.startswith(prefix):
                ids.append(text[len(prefix) :].strip())
    return ids


def load_image_archive(
    lock: Lock,
    target: str,
    archive: Path,
    sidecar: Sidecar,
    verify: Callable[[Sidecar], None],
    tag: str | None = None,
    progress: ProgressFn | None = None,
) -> InspectReport:
    """Load `archive` only if `verify` accepts its sidecar and everything it vouches for holds;
    tag the image (the sidecar's tag, or `tag`) and return its inspection against the lock."""
    import docker.errors

    verify(sidecar)
    lock_digest = lock.digest
    if sidecar.lock_digest != lock_digest:
        raise IntegrityError(
            f"sidecar was made for lock {sidecar.lock_digest[:12]}, this lock is "
            f"{lock_digest[:12]}: refused, nothing loaded"
        )
    if sidecar.target != target:
        raise IntegrityError(f"sidecar is for target {sidecar.target}, not {target}: refused, nothing loaded")
    if (
        archive.stat().st_size != sidecar.archive_bytes
        or archive_sha256(archive, progress) != sidecar.archive_sha256
    ):
        raise IntegrityError(
            f"{archive} differs from the archive its sidecar describes (sha256 "
            f"{sidecar.archive_sha256[:16]}...): refused, nothing loaded"
        )
    client = docker_client()
    before = {image.id for image in client.images.list(all=True)}
    try:
        with os.fdopen(open_regular(archive), "rb") as handle:
            loaded = _loaded_ids(client.api.load_image(handle, quiet=True))
    except docker.errors.APIError as exc:
        raise IntegrityError(f"docker load refused {archive}: {exc.explanation or exc}") from None

    def refuse(message: str) -> IntegrityError:
        for image_id in loaded:
            if image_id not in before:
                client.images.remove(image_id, force=True)
        return IntegrityError(f"{message}: refused and removed")

    if loaded != [sidecar.image_id]:
        raise refuse(
            f"{archive} holds {', '.join(loaded) or 'no image'}, the sidecar names {sidecar.image_id}"
        )
    image = client.images.get(sidecar.image_id)
    labels = dict(image.labels or {})
    if labels != sidecar.labels:
        changed = sorted(
            k for k in set(labels) | set(sidecar.labels) if labels.get(k) != sidecar.labels.get(k)
        )
        raise refuse(f"image labels differ from the sidecar's ({', '.join(changed)})")
    report = inspect_labels(lock, tag or sidecar.tag, labels, image.id, int(image.attrs.get("Size", 0)))
    if labels.get(L.TARGET) != target:
        report.drifts.append(L.Drift(L.TARGET, labels.get(L.TARGET), target, "an image for another target"))
    if not report.matches:
        raise refuse(drift_message(report))
    image.tag(*_split_ref(tag or sidecar.tag))
    return report


def _split_ref(ref: str) -> tuple[str, str]:
    """(repository, tag) of a reference; `latest` when it names no tag."""
    repo, sep, name = ref.rpartition(":")
    if not sep or "/" in name:
        return ref, "latest"
    return repo, name
