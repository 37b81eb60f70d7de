"""Push and pull through a real local registry (Debian's docker-registry on 127.0.0.1): what a
pull refuses after the download, and a push that cannot reach its registry. The release's whole
sequence and the refusals before a download: test_release_publish.py."""

import io
import json
from pathlib import Path

import pytest

from appliance.images import labels as L
from tests.conftest import run_cli
from tests.integration.conftest import free_port, sign_record

pytestmark = [pytest.mark.docker, pytest.mark.engine, pytest.mark.slow]


def test_pull_refuses_a_signed_image_whose_labels_drift_from_the_lock(
    engine_image_cpu: str, registry: str, lock_copy: Path, release_key: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    altered = f"{registry}/moe-expert-cache:altered"
    dockerfile = f"FROM {engine_image_cpu}\nLABEL {L.SERIES_DIGEST}={'0' * 64}\n"
    image, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=altered, rm=True)
    digest = None
    for chunk in docker_client.api.push(altered, stream=True, decode=True):
        assert "error" not in chunk, chunk
        digest = chunk.get("aux", {}).get("Digest", digest)
    assert digest
    reference = f"{registry}/moe-expert-cache@{digest}"
    signed = sign_record(lock_copy, release_key, "cpu", reference, image.id, dict(image.labels))
    docker_client.images.remove(altered, force=True)
    raw = json.loads(lock_copy.read_text())
    raw["published_images"] = {"cpu": {"reference": reference, "record": signed}}
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
    engine_image_cpu: str, lock_copy: Path, release_key: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    nowhere = f"127.0.0.1:{free_port()}"
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
        "--key",
        str(release_key),
        "--lock",
        str(lock_copy),
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: push to {nowhere} failed")
    assert result.stderr.count("\n") == 1
    assert not docker_client.images.list(name=f"{nowhere}/moe-expert-cache")
    assert lock_copy.read_bytes() == before
