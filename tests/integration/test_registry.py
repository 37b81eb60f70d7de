"""Publish and pull through a real local registry (Debian's docker-registry on 127.0.0.1)."""

import io
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.images import labels as L
from tests.conftest import REPO, run_cli, unavailable

pytestmark = [pytest.mark.docker, pytest.mark.engine, pytest.mark.slow]

REGISTRY_BINARY = "/usr/bin/docker-registry"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a fresh registry with its own storage; stopped after the module."""
    if not Path(REGISTRY_BINARY).exists():
        unavailable("docker-registry not installed (apt-get install docker-registry)")
    root = tmp_path_factory.mktemp("registry")
    port = _free_port()
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n"
    )
    log = open(root / "registry.log", "w")  # noqa: SIM115 - closed after the process ends
    proc = subprocess.Popen([REGISTRY_BINARY, "serve", str(config)], stdout=log, stderr=log)
    address = f"127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"docker-registry exited: {(root / 'registry.log').read_text()}")
                time.sleep(0.2)
        else:
            pytest.fail(f"docker-registry did not answer on {address}")
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture
def lock_copy(tmp_path: Path) -> Path:
    path = tmp_path / "llama.cpp.lock.json"
    shutil.copy(REPO / "engine" / "llama.cpp.lock.json", path)
    return path


def test_push_remove_and_pull_back_by_digest(
    engine_image_cpu: str, registry: str, lock_copy: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    original = docker_client.images.get(engine_image_cpu)
    pushed = run_cli(
        "image", "push", "--target", "cpu", "--registry", registry, "--lock", str(lock_copy), check=True
    )  # picks the image built from this lock
    assert f"pushed {engine_image_cpu} as " in pushed.stdout
    entry = json.loads(lock_copy.read_text())["published_images"]["cpu"]
    repo, digest = entry["reference"].split("@")
    assert repo == f"{registry}/moe-expert-cache"
    assert digest.startswith("sha256:") and len(digest) == 71
    assert entry["reference"] in pushed.stdout
    assert entry["image_id"] == original.id
    # the registry serves that manifest under that digest
    request = urllib.request.Request(
        f"http://{registry}/v2/moe-expert-cache/manifests/{digest}",
        method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(request) as response:
        assert response.headers["Docker-Content-Digest"] == digest

    docker_client.images.remove(original.id, force=True)
    assert not docker_client.images.list(
        filters={"label": f"{L.INPUTS_DIGEST}={original.labels[L.INPUTS_DIGEST]}"}
    )
    pulled = run_cli("pull", "cpu", "--lock", str(lock_copy), "--json", check=True)
    report = json.loads(pulled.stdout)
    assert report == {"ref": engine_image_cpu, "image_id": original.id, "matches": True}
    back = docker_client.images.get(engine_image_cpu)
    assert back.id == original.id
    assert entry["reference"] in back.attrs["RepoDigests"]


def test_pull_refuses_an_image_with_altered_labels(
    engine_image_cpu: str, registry: str, lock_copy: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    altered = f"{registry}/moe-expert-cache:altered"
    dockerfile = f"FROM {engine_image_cpu}\nLABEL {L.SERIES_DIGEST}={'0' * 64}\n"
    image, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=altered, rm=True)
    digest = None
    for chunk in docker_client.api.push(altered, stream=True, decode=True):
        assert "error" not in chunk, chunk
        digest = chunk.get("aux", {}).get("Digest", digest)
    assert digest
    docker_client.images.remove(altered, force=True)
    raw = json.loads(lock_copy.read_text())
    reference = f"{registry}/moe-expert-cache@{digest}"
    raw["published_images"] = {"cpu": {"reference": reference}}
    lock_copy.write_text(json.dumps(raw))

    result = run_cli("pull", "cpu", "--lock", str(lock_copy))
    assert result.returncode == 3
    assert "built with another patch series" in result.stderr
    assert "refused and removed" in result.stderr
    assert not [
        i for i in docker_client.images.list() if any(d == reference for d in i.attrs.get("RepoDigests", []))
    ]
    assert docker_client.images.get(engine_image_cpu).labels[L.SERIES_DIGEST] != "0" * 64


def test_pull_accepts_digest_references_only(lock_copy: Path, registry: str) -> None:
    raw = json.loads(lock_copy.read_text())
    raw["published_images"] = {"cpu": {"reference": f"{registry}/moe-expert-cache:latest"}}
    lock_copy.write_text(json.dumps(raw))
    result = run_cli("pull", "cpu", "--lock", str(lock_copy))
    assert result.returncode == 2
    assert "pull is by digest only" in result.stderr


def test_pull_without_a_published_image_says_how_to_get_one(lock_copy: Path) -> None:
    result = run_cli("pull", "sm120", "--lock", str(lock_copy))
    assert result.returncode == 1
    assert result.stderr.startswith("error: the lock names no published image for sm120")


def test_push_to_an_unreachable_registry_leaves_no_tag_behind(
    engine_image_cpu: str, lock_copy: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    nowhere = f"127.0.0.1:{_free_port()}"
    before = lock_copy.read_bytes()
    result = run_cli(
        "image",
        "push",
        "--target",
        "cpu",
        "--registry",
        nowhere,
        "--image",
        engine_image_cpu,
        "--lock",
        str(lock_copy),
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: push to {nowhere} failed")
    assert result.stderr.count("\n") == 1
    assert not docker_client.images.list(name=f"{nowhere}/moe-expert-cache")
    assert lock_copy.read_bytes() == before
