"""Engine images to and from a registry, by digest, checked against the lock.

`push_image` tags a local engine image that matches the lock into `REGISTRY/moe-expert-cache`
and pushes it; `docker_pull` pulls a `REGISTRY/moe-expert-cache@sha256:...` reference and
refuses an image that does not carry that digest. What is recorded in the lock and checked
before and after a pull is appliance/release/published.py's.
"""

import io
import json
import re
import tarfile
from dataclasses import dataclass
from typing import Any

from appliance.core.checks import one_line
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.strict_load import parse_json
from appliance.engine.lock import Lock
from appliance.host.docker import docker_client
from appliance.images import labels as L
from appliance.images.base import local_image
from appliance.images.inspection import InspectReport, drift_message, inspect_image

DIGEST_REF_RE = re.compile(r"^(?P<repo>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})$")


@dataclass(frozen=True)
class Published:
    target: str
    reference: str
    tag: str
    local_tag: str
    image_id: str


def engine_images_for(client: Any, lock: Lock, target: str) -> list[Any]:
    """Local images labelled for `target` and built from this lock."""
    found = client.images.list(filters={"label": [f"{L.TARGET}={target}", f"{L.LOCK_DIGEST}={lock.digest}"]})
    return sorted(found, key=lambda image: image.attrs.get("Created", ""), reverse=True)


def choose_local_image(client: Any, lock: Lock, target: str, image_ref: str | None) -> str:
    if image_ref:
        return image_ref
    candidates = [
        image
        for image in engine_images_for(client, lock, target)
        if not L.experimental_of_labels(image.labels or {})  # those only when named with --image
    ]
    tagged = [tag for image in candidates for tag in image.tags if tag.startswith(f"{L.IMAGE_REPOSITORY}:")]
    if not tagged:
        raise ApplianceError(
            f"no local {target} image built from this lock without experimental patches: run "
            f"`appliance image build --target {target}` first, or name one with --image"
        )
    canonical = [t for t in tagged if "-standin-" not in t and "-local-" not in t]
    return (canonical or tagged)[0]


def matching_local_image(
    lock: Lock, target: str, image_ref: str | None, purpose: str
) -> tuple[Any, str, InspectReport]:
    """(client, tag, inspection) of the target's local image (or `image_ref`), refused with
    IntegrityError when its labels drift from the lock: nothing leaves this machine unchecked."""
    lock.target(target)
    client = docker_client()
    ref = choose_local_image(client, lock, target, image_ref)
    report = inspect_image(lock, ref, client)
    if not report.matches:
        raise IntegrityError(drift_message(report) + f"; refusing to {purpose} it")
    return client, ref, report


def push_image(lock: Lock, target: str, registry: str, image_ref: str | None = None) -> Published:
    """Push the target's image (checked against the lock) to `registry`; its manifest digest."""
    client, local_tag, _ = matching_local_image(lock, target, image_ref, "publish")
    remote_repo = f"{registry.rstrip('/')}/{L.IMAGE_REPOSITORY}"
    remote_tag = local_tag.split(":", 1)[1]
    image = client.images.get(local_tag)
    image.tag(remote_repo, remote_tag)
    try:
        digest = _push(client, remote_repo, remote_tag, registry)
    except ApplianceError:
        client.images.remove(f"{remote_repo}:{remote_tag}")  # leave nothing half-published
        raise
    return Published(target, f"{remote_repo}@{digest}", f"{remote_repo}:{remote_tag}", local_tag, image.id)


def _push(client: Any, repo: str, tag: str, registry: str) -> str:
    """Push repo:tag; the manifest digest the registry answered with."""
    import docker.errors

    digest = None
    try:
        for chunk in client.api.push(repo, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise ApplianceError(
                    f"push to {registry} failed: {chunk['error']} (is the registry running and reachable?)"
                )
            digest = chunk.get("aux", {}).get("Digest", digest)
    except docker.errors.APIError as exc:
        raise ApplianceError(f"push to {registry} failed: {exc.explanation or exc}") from None
    if not digest:
        raise ApplianceError(f"push to {registry} reported no manifest digest")
    return str(digest)


RECORD_FILE = "record.dsse.json"
RECORD_TAG_SUFFIX = ".record"  # the record's tag beside its image: sha256-<hex>.record


def record_tag(digest: str) -> str:
    """The tag under which a published image's signed record is kept beside it (the cosign-style
    sha256-<hex> prefix, which any registry accepts)."""
    return digest.replace(":", "-") + RECORD_TAG_SUFFIX


def push_record(client: Any, reference: str, envelope: dict[str, Any], registry: str) -> str:
    """Push `envelope` as a one-file image (FROM scratch) tagged record_tag(digest) in the
    image's repository, so the registry serves the record beside the image; its reference."""
    repo, _, digest = reference.partition("@")
    tag = record_tag(digest)
    payload = json.dumps(envelope, sort_keys=True, indent=2).encode()
    dockerfile = f"FROM scratch\nCOPY {RECORD_FILE} /\nLABEL {L.OWN}.record-for={digest}\n".encode()
    context = io.BytesIO()
    with tarfile.TarFile(fileobj=context, mode="w") as tar:  # in memory: the build context
        for name, data in (("Dockerfile", dockerfile), (RECORD_FILE, payload)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    image, _ = client.images.build(fileobj=context, custom_context=True, tag=f"{repo}:{tag}", rm=True)
    try:
        pushed = _push(client, repo, tag, registry)
    finally:
        client.images.remove(image.id, force=True)  # the record lives in the registry and the lock
    return f"{repo}@{pushed}"


def published_reference(lock: Lock, target: str) -> str:
    lock.target(target)
    entry = lock.published_images.get(target)
    if not entry:
        raise ApplianceError(
            f"the lock names no published image for {target}: build it with "
            f"`appliance image build --target {target}`, or push one"
        )
    reference = entry.get("reference") if isinstance(entry, dict) else entry
    if not isinstance(reference, str) or not DIGEST_REF_RE.match(reference):
        raise ConfigError(
            f"{lock.path}: published_images.{target}: {reference!r} is not a "
            "REGISTRY/REPO@sha256:<64 hex> reference (pull is by digest only)"
        )
    return reference


def docker_pull(client: Any, reference: str) -> Any:
    """Pull `reference` by digest; the local image, which must carry that digest."""
    import docker.errors

    try:
        for chunk in client.api.pull(reference, stream=True, decode=True):
            if "error" in chunk:
                raise ApplianceError(f"pull of {reference} failed: {one_line(str(chunk['error']))}")
    except docker.errors.APIError as exc:
        raise ApplianceError(f"pull of {reference} failed: {one_line(str(exc.explanation or exc))}") from None
    image = local_image(client, reference)
    digest = DIGEST_REF_RE.match(reference).group("digest")  # type: ignore[union-attr]
    if image is None or not any(d.endswith(digest) for d in image.attrs.get("RepoDigests", [])):
        if image is not None:
            client.images.remove(reference, force=True)
        raise IntegrityError(f"pulled image does not carry digest {digest}: refused and removed")
    return image


def tag_as_local(lock: Lock, target: str, image: Any, report: InspectReport) -> str:
    """Tag a pulled image with the local tag its labels give it (as a build would); that tag."""
    identity = _label_identity(report.labels)
    experimental = L.experimental_of_labels(report.labels)
    local_tag = L.image_tag(lock, target, identity, experimental, report.labels.get(L.SERIES_DIGEST, ""))
    repo, tag = local_tag.split(":", 1)
    image.tag(repo, tag)
    return local_tag


def _label_identity(labels: dict[str, str]) -> dict[str, Any]:
    try:
        value = parse_json(labels.get(L.SOURCE_IDENTITY, "{}"), L.SOURCE_IDENTITY)
    except ConfigError:
        value = {}
    return value if isinstance(value, dict) else {}
