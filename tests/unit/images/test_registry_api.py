"""What a registry answers for a digest, asked over HTTP on 127.0.0.1 from a server made here:
the manifest's own sha256 decides, not the header the registry sends; sizes are summed."""

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.core.errors import ApplianceError, IntegrityError
from appliance.images.registry_api import MAX_MANIFEST_BYTES, remote_manifest, split_reference


class Registry(http.server.ThreadingHTTPServer):
    manifests: dict[str, bytes]
    header_digest: str | None = None


class Handler(http.server.BaseHTTPRequestHandler):
    server: Registry

    def do_GET(self) -> None:  # noqa: N802 - the http.server interface
        digest = self.path.rsplit("/", 1)[-1]
        body = self.server.manifests.get(digest)
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Docker-Content-Digest", self.server.header_digest or digest)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[Registry]:
    server = Registry(("127.0.0.1", 0), Handler)
    server.manifests = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def publish(server: Registry, body: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    server.manifests[digest] = body
    return f"127.0.0.1:{server.server_address[1]}/moe-expert-cache@{digest}"


def manifest(config: int, *layers: int) -> bytes:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"size": config, "digest": "sha256:" + "0" * 64},
            "layers": [{"size": size, "digest": "sha256:" + "1" * 64} for size in layers],
        }
    ).encode()


def test_the_bytes_a_pull_transfers_are_the_config_and_layers(registry: Registry) -> None:
    reference = publish(registry, manifest(1_500, 31_000_000, 10_500_000))
    remote = remote_manifest(reference)
    assert remote.transfer_bytes == 1_500 + 31_000_000 + 10_500_000
    assert remote.digest == reference.split("@")[1]


def test_a_digest_the_registry_lacks_is_one_line(registry: Registry) -> None:
    reference = publish(registry, manifest(1, 2)).replace("sha256:", "sha256:f", 1)[:-1]
    with pytest.raises(ApplianceError, match=r"has no manifest sha256:f.* in moe-expert-cache"):
        remote_manifest(reference)


def test_bytes_that_hash_to_another_digest_are_refused_whatever_the_header_says(registry: Registry) -> None:
    reference = publish(registry, manifest(1, 2))
    digest = reference.split("@")[1]
    registry.manifests[digest] = manifest(1, 3)  # the header still names the digest asked for
    with pytest.raises(IntegrityError, match="a different image, refused"):
        remote_manifest(reference)


def test_a_header_naming_another_digest_is_refused(registry: Registry) -> None:
    reference = publish(registry, manifest(1, 2))
    registry.header_digest = "sha256:" + "e" * 64
    with pytest.raises(IntegrityError, match=f"answered digest sha256:{'e' * 64}"):
        remote_manifest(reference)


def test_a_manifest_at_the_size_limit_is_read_and_one_byte_more_refused(registry: Registry) -> None:
    body = manifest(1, 2)
    at_limit = body + b" " * (MAX_MANIFEST_BYTES - len(body))
    assert remote_manifest(publish(registry, at_limit)).transfer_bytes == 3
    with pytest.raises(IntegrityError, match=f"over {MAX_MANIFEST_BYTES} bytes"):
        remote_manifest(publish(registry, at_limit + b" "))


def test_a_manifest_without_sizes_is_refused(registry: Registry) -> None:
    body = json.dumps({"config": {"digest": "x"}, "layers": [{"size": True}]}).encode()
    with pytest.raises(IntegrityError, match="without blob sizes"):
        remote_manifest(publish(registry, body))


def test_a_registry_nobody_listens_on_is_one_line() -> None:
    with pytest.raises(ApplianceError, match=r"registry 127.0.0.1:9 is not reachable"):
        remote_manifest(f"127.0.0.1:9/moe-expert-cache@sha256:{'a' * 64}", timeout=5)


def test_split_reference_names_the_parts() -> None:
    assert split_reference(f"ghcr.io/owner/moe-expert-cache@sha256:{'a' * 64}") == (
        "ghcr.io",
        "owner/moe-expert-cache",
        f"sha256:{'a' * 64}",
    )
    with pytest.raises(ApplianceError, match="is not REGISTRY/REPO@sha256"):
        split_reference("moe-expert-cache:latest")
