"""The release's build-push-sign-record script (what .github/workflows/release.yml runs) against
a real registry on 127.0.0.1, then `appliance pull` by the default path (the lock's digest, its
signed record checked against the pinned release key), the dry run, `make demo`'s pull-or-build
choice, and each refusal before a download: one line, nothing tagged, the lock untouched."""

import base64
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from appliance.engine.lock import load_lock
from appliance.images import labels as L
from appliance.workflows.run import obtain_engine_image
from tests.conftest import REPO, run_cli
from tests.engine_image import STAND_IN
from tests.integration.conftest import sign_record

pytestmark = [pytest.mark.docker, pytest.mark.engine, pytest.mark.slow]

SCRIPT = REPO / "scripts" / "release-publish.sh"


@pytest.fixture(scope="module")
def published(
    engine_image_cpu: str, registry: str, release_key: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The cpu image published by the release script into a lock copy with the key pinned."""
    root = tmp_path_factory.mktemp("release")
    lock_path = root / "llama.cpp.lock.json"
    lock_path.write_bytes((REPO / "engine" / "llama.cpp.lock.json").read_bytes())
    run_cli("image", "pin-key", str(release_key), "--lock", str(lock_path), check=True)
    env = {
        **os.environ,
        "APPLIANCE": f"{sys.executable} -m appliance",
        "LOCK": str(lock_path),
        "SOURCE": STAND_IN,  # the source the test image is built from; the workflow's is canonical
        "PYTHONPATH": str(REPO),
    }
    key_file = release_key / "appliance-ed25519.key"
    result = subprocess.run(
        [str(SCRIPT), registry, str(key_file), str(root / "out"), "cpu"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "release: published " in result.stdout
    return {
        "lock": lock_path,
        "lock_bytes": lock_path.read_bytes(),
        "out": json.loads((root / "out" / "cpu.json").read_text()),
        "image": engine_image_cpu,
    }


@pytest.fixture
def lock_with(published: dict[str, Any], tmp_path: Path) -> Iterator[Any]:
    """Write a changed copy of the published lock: `lock_with(change)` -> its path."""

    def make(change: Any) -> Path:
        raw = json.loads(published["lock_bytes"])
        change(raw["published_images"]["cpu"])
        path = tmp_path / "llama.cpp.lock.json"
        path.write_text(json.dumps(raw))
        return path

    yield make


def test_the_script_records_the_digest_and_a_signed_record(published: dict[str, Any], registry: str) -> None:
    entry = json.loads(published["lock_bytes"])["published_images"]["cpu"]
    out = published["out"]
    assert entry["reference"] == out["reference"] == f"{out['name']}@{out['digest']}"
    assert out["name"] == f"{registry}/{L.IMAGE_REPOSITORY}"
    assert entry["transfer_bytes"] == out["transfer_bytes"] > 1_000_000  # config and layers
    envelope = entry["record"]
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["subject"][0]["digest"]["sha256"] == out["digest"].removeprefix("sha256:")
    assert statement["predicate"]["lock_digest"] == load_lock().digest
    assert len(envelope["signatures"]) == 1


def test_the_registry_keeps_the_same_signed_record_beside_the_image(
    published: dict[str, Any], registry: str
) -> None:
    entry = json.loads(published["lock_bytes"])["published_images"]["cpu"]
    tag = "sha256-" + published["out"]["digest"].removeprefix("sha256:") + ".record"
    accept = {"Accept": "application/vnd.docker.distribution.manifest.v2+json"}
    base = f"http://{registry}/v2/{L.IMAGE_REPOSITORY}"
    request = urllib.request.Request(f"{base}/manifests/{tag}", headers=accept)
    with urllib.request.urlopen(request, timeout=30) as answer:
        manifest = json.loads(answer.read())
        assert (
            entry["record_reference"]
            == f"{registry}/{L.IMAGE_REPOSITORY}@{answer.headers['Docker-Content-Digest']}"
        )
    (layer,) = manifest["layers"]
    with urllib.request.urlopen(f"{base}/blobs/{layer['digest']}", timeout=30) as answer:
        blob = answer.read()
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        member = tar.extractfile("record.dsse.json")
        assert member is not None
        assert json.loads(member.read()) == entry["record"]


def test_the_default_pull_takes_the_published_digest_after_checking_its_record(
    published: dict[str, Any], docker_client
) -> None:  # type: ignore[no-untyped-def]
    original = docker_client.images.get(published["image"])
    docker_client.images.remove(original.id, force=True)
    pulled = run_cli("pull", "cpu", "--lock", str(published["lock"]), check=True)
    assert "signed record verified, matches the lock" in pulled.stdout
    back = docker_client.images.get(published["image"])
    assert back.id == original.id
    assert published["out"]["reference"] in back.attrs["RepoDigests"]
    assert published["lock"].read_bytes() == published["lock_bytes"]


def test_demo_pulls_the_published_image_instead_of_building(published: dict[str, Any], docker_client) -> None:  # type: ignore[no-untyped-def]
    original = docker_client.images.get(published["image"])
    docker_client.images.remove(original.id, force=True)
    console = Console(record=True, width=200)
    tag = obtain_engine_image(load_lock(published["lock"]), "cpu", "auto", console)
    said = console.export_text()
    assert tag == published["image"]
    assert "pulled in" in said and "signed record verified (no build)" in said
    assert docker_client.images.get(tag).id == original.id


def test_dry_run_shows_size_and_digest_and_pulls_nothing(published: dict[str, Any]) -> None:
    result = run_cli("pull", "cpu", "--dry-run", "--json", "--lock", str(published["lock"]), check=True)
    facts = json.loads(result.stdout)
    assert facts["digest"] == published["out"]["digest"]
    assert facts["transfer_bytes"] == published["out"]["transfer_bytes"]
    assert facts["transfer_bytes_from"] == "registry"
    assert facts["cuda_version"] is None and facts["min_driver"] is None  # a cpu image
    text = run_cli("pull", "cpu", "--dry-run", "--lock", str(published["lock"]), check=True).stdout
    assert f"{published['out']['transfer_bytes'] / 1e6:.1f} MB to download" in text
    assert "no CUDA (cpu image)" in text and "nothing pulled" in text


def _tamper(entry: dict[str, Any]) -> None:
    statement = json.loads(base64.b64decode(entry["record"]["payload"]))
    statement["predicate"]["labels"][L.SERIES_DIGEST] = "0" * 64
    entry["record"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()


def _other_digest(entry: dict[str, Any]) -> None:
    name, digest = entry["reference"].split("@")
    entry["reference"] = f"{name}@sha256:{'0' * 64 if not digest.endswith('0' * 64) else '1' * 64}"


def _unsigned(entry: dict[str, Any]) -> None:
    entry["record"]["signatures"] = []


def _no_record(entry: dict[str, Any]) -> None:
    del entry["record"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_tamper, "does not match its contents (altered after signing): refused"),
        (_other_digest, "the signed record is for "),
        (_unsigned, "record is unsigned: refused"),
        (_no_record, "has no signed record: refused"),
    ],
    ids=["tampered-record", "digest-differs", "unsigned-record", "no-record"],
)
def test_a_record_that_does_not_vouch_for_the_digest_is_refused_before_pulling(
    lock_with: Any, change: Any, says: str, docker_client
) -> None:  # type: ignore[no-untyped-def]
    path = lock_with(change)
    before = path.read_bytes()
    images = {image.id for image in docker_client.images.list(all=True)}
    result = run_cli("pull", "cpu", "--lock", str(path))
    assert result.returncode == 3, result.stderr
    assert says in result.stderr and result.stderr.count("\n") == 1
    assert path.read_bytes() == before
    assert {image.id for image in docker_client.images.list(all=True)} == images


def test_a_record_signed_by_a_key_the_lock_does_not_pin_is_refused(lock_with: Any, tmp_path: Path) -> None:
    from appliance.attest.dsse import init_keys

    stranger = init_keys(tmp_path / "stranger")
    path = lock_with(lambda entry: None)
    entry = json.loads(path.read_text())["published_images"]["cpu"]
    statement = json.loads(base64.b64decode(entry["record"]["payload"]))
    forged = sign_record(
        path,
        tmp_path / "stranger",
        "cpu",
        entry["reference"],
        statement["predicate"]["image_id"],
        statement["predicate"]["labels"],
    )
    path = lock_with(lambda entry: entry.update(record=forged))
    result = run_cli("pull", "cpu", "--lock", str(path))
    assert result.returncode == 3
    assert f"signed by {stranger.keyid}, which the lock does not pin: refused" in result.stderr


def test_a_digest_the_registry_does_not_have_is_refused_before_pulling(
    lock_with: Any, release_key: Path, registry: str, docker_client
) -> None:  # type: ignore[no-untyped-def]
    reference = f"{registry}/{L.IMAGE_REPOSITORY}@sha256:{'ab' * 32}"
    path = lock_with(lambda entry: entry.update(reference=reference))
    record = sign_record(path, release_key, "cpu", reference, "sha256:" + "cd" * 32, {})
    path = lock_with(lambda entry: entry.update(reference=reference, record=record))
    images = {image.id for image in docker_client.images.list(all=True)}
    result = run_cli("pull", "cpu", "--lock", str(path))
    assert result.returncode == 1
    assert f"registry {registry} has no manifest sha256:{'ab' * 32}" in result.stderr
    assert {image.id for image in docker_client.images.list(all=True)} == images


def test_a_registry_that_does_not_answer_in_time_is_refused(
    lock_with: Any, release_key: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        host = f"127.0.0.1:{silent.getsockname()[1]}"
        reference = f"{host}/{L.IMAGE_REPOSITORY}@sha256:{'ef' * 32}"
        record = sign_record(
            lock_with(lambda entry: None), release_key, "cpu", reference, "sha256:" + "cd" * 32, {}
        )
        path = lock_with(lambda entry: entry.update(reference=reference, record=record))
        result = run_cli("pull", "cpu", "--timeout", "1", "--lock", str(path))
    assert result.returncode == 1
    assert f"registry {host} did not answer within 1 s: nothing pulled" in result.stderr
    assert not docker_client.images.list(name=f"{host}/{L.IMAGE_REPOSITORY}")


def test_a_push_with_a_key_the_lock_does_not_pin_is_refused_before_pushing(
    published: dict[str, Any], registry: str, tmp_path: Path
) -> None:
    from appliance.attest.dsse import init_keys

    stranger = init_keys(tmp_path / "stranger")
    result = run_cli(
        "image",
        "push",
        "--target",
        "cpu",
        "--registry",
        registry,
        "--key",
        str(tmp_path / "stranger"),
        "--lock",
        str(published["lock"]),
    )
    assert result.returncode == 2
    assert f"signing key {stranger.keyid} is not pinned" in result.stderr
    assert published["lock"].read_bytes() == published["lock_bytes"]
