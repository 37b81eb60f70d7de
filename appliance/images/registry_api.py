"""What a registry holds under a digest, asked over the distribution API before anything is
pulled: whether the manifest is there, the digest the registry answers with, and the bytes a
pull would transfer (the config and layer blobs the manifest lists).

Loopback registries are spoken to over plain HTTP (as the Docker engine does); any other over
HTTPS, with the anonymous bearer token a public registry hands out for pulls.
"""

import hashlib
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from appliance.core.checks import one_line
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.strict_load import parse_json_bytes

REGISTRY_TIMEOUT_S = 20.0  # one request; a registry slower than this is reported, not waited on
MAX_MANIFEST_BYTES = 4 << 20
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
LOOPBACK_HOSTS = ("localhost", "127.", "[::1]")
CHALLENGE_RE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class RemoteManifest:
    reference: str
    digest: str  # what the registry answered in Docker-Content-Digest
    media_type: str
    transfer_bytes: int  # config and layer blobs; 0 for an index (its platforms are not summed)


def split_reference(reference: str) -> tuple[str, str, str]:
    """(registry host, repository path, digest) of REGISTRY/REPO@sha256:..."""
    name, _, digest = reference.partition("@")
    host, _, repository = name.partition("/")
    if not repository or not digest:
        raise ApplianceError(f"{reference!r} is not REGISTRY/REPO@sha256:<digest>")
    return host, repository, digest


def _scheme(host: str) -> str:
    return "http" if host.startswith(LOOPBACK_HOSTS) else "https"


def _anonymous_token(challenge: str, repository: str, timeout: float) -> str | None:
    if not challenge.lower().startswith("bearer "):
        return None
    fields = dict(CHALLENGE_RE.findall(challenge))
    realm = fields.pop("realm", "")
    if not realm.startswith("https://"):
        return None
    fields.setdefault("scope", f"repository:{repository}:pull")
    with urllib.request.urlopen(f"{realm}?{urllib.parse.urlencode(fields)}", timeout=timeout) as answer:
        answered = parse_json_bytes(
            answer.read(MAX_MANIFEST_BYTES + 1), f"{realm}: token", MAX_MANIFEST_BYTES
        )
    token = answered.get("token") if isinstance(answered, dict) else None
    return token if isinstance(token, str) else None


def _get(url: str, token: str | None, timeout: float) -> tuple[dict[str, str], bytes]:
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return dict(answer.headers.items()), answer.read(MAX_MANIFEST_BYTES + 1)


def remote_manifest(reference: str, timeout: float = REGISTRY_TIMEOUT_S) -> RemoteManifest:
    """The registry's manifest for a digest reference; one-line ApplianceError when the registry
    does not answer in time or has no such manifest, IntegrityError when it answers another digest."""
    host, repository, digest = split_reference(reference)
    url = f"{_scheme(host)}://{host}/v2/{repository}/manifests/{digest}"
    try:
        try:
            headers, body = _get(url, None, timeout)
        except urllib.error.HTTPError as exc:
            token = _anonymous_token(exc.headers.get("WWW-Authenticate", ""), repository, timeout)
            if exc.code != 401 or token is None:
                raise
            headers, body = _get(url, token, timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise ApplianceError(
                f"registry {host} has no manifest {digest} in {repository}: the lock's published "
                "image is not there (build the image, or record the digest the release pushed)"
            ) from None
        raise ApplianceError(f"registry {host} answered HTTP {exc.code} for {reference}") from None
    except TimeoutError:
        raise ApplianceError(
            f"registry {host} did not answer within {timeout:.0f} s: nothing pulled (try again later, "
            "or build the image)"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApplianceError(f"registry {host} is not reachable ({one_line(str(reason))})") from None
    if len(body) > MAX_MANIFEST_BYTES:
        raise IntegrityError(f"registry {host} sent a manifest over {MAX_MANIFEST_BYTES} bytes: refused")
    answered = headers.get("Docker-Content-Digest") or headers.get("docker-content-digest")
    if answered and answered != digest:
        raise IntegrityError(
            f"registry {host} answered digest {answered} for {digest}: a different image, refused"
        )
    computed = "sha256:" + hashlib.sha256(body).hexdigest()
    if computed != digest:
        raise IntegrityError(
            f"registry {host} sent a manifest whose sha256 is {computed}, not {digest}: "
            "a different image, refused"
        )
    return RemoteManifest(reference, digest, *_describe(body, host))


def _describe(body: bytes, host: str) -> tuple[str, int]:
    try:
        manifest: Any = parse_json_bytes(body, f"registry {host}: manifest", MAX_MANIFEST_BYTES)
    except ConfigError as exc:
        raise IntegrityError(f"{exc}: refused") from None
    if not isinstance(manifest, dict):
        raise IntegrityError(f"registry {host} sent a manifest that is not a JSON object: refused")
    media_type = str(manifest.get("mediaType", ""))
    if "manifests" in manifest:
        return media_type, 0
    blobs = [manifest.get("config") or {}, *(manifest.get("layers") or [])]
    sizes = [blob.get("size") for blob in blobs if isinstance(blob, dict)]
    counted = [size for size in sizes if isinstance(size, int) and not isinstance(size, bool) and size >= 0]
    if not sizes or len(counted) != len(sizes):
        raise IntegrityError(f"registry {host} sent a manifest without blob sizes: refused")
    return media_type, sum(counted)
