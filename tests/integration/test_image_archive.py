"""Images without a registry: export -> remove -> pull --from round-trips; tampering is refused.

The image is a small one made here (the runtime base with the labels a cpu engine build from
this lock and the b10229 stand-in carries), tagged under a test repository, so that removing
and loading it never touches the shared engine image.
"""

import contextlib
import hashlib
import io
import json
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.dsse import init_keys, load_signer
from appliance.engine.lock import load_lock
from appliance.engine.source import fetch_source
from appliance.images import labels as L
from appliance.images.archive import Sidecar, read_sidecar, sidecar_path, sign_sidecar
from appliance.images.build import plan_inputs
from tests.conftest import run_cli

REPOSITORY = "moe-appliance-test/archive"


def _build(client: Any, base: str, labels: dict[str, str], tag: str) -> Any:
    dockerfile = f'FROM {base}\nCMD ["sh", "-c", "echo ran"]\n'.encode()
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), labels=labels, tag=tag, rm=True)
    return image


@pytest.fixture
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("keys")
    init_keys(directory)
    return directory


@pytest.fixture
def engine_like_image(docker_client, runtime_base_image: str) -> Iterator[str]:  # type: ignore[no-untyped-def]
    lock = load_lock()
    inputs = plan_inputs(lock, lock.target("cpu"), fetch_source(lock, "b10229"), docker_client)
    labels = {**L.expected_labels(lock, inputs, "2026-11-30T00:00:00Z"), "test.nonce": secrets.token_hex(8)}
    tag = f"{REPOSITORY}:{secrets.token_hex(6)}"
    image = _build(docker_client, runtime_base_image, labels, tag)
    yield tag
    import docker.errors

    for ref in (tag, image.id):
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(ref, force=True)


def _export(tag: str, out: Path, keys: Path) -> Sidecar:
    result = run_cli("image", "export", "cpu", str(out), "--image", tag, "--key", str(keys))
    assert result.returncode == 0, result.stderr
    return read_sidecar(sidecar_path(out))


def _image_ids(client: Any) -> set[str]:
    return {image.id for image in client.images.list(all=True)}


def _one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


def test_export_remove_pull_from_round_trips_and_runs(
    engine_like_image: str, keys: Path, tmp_path: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    archive = tmp_path / "cpu.tar"
    sidecar = _export(engine_like_image, archive, keys)
    image_id = docker_client.images.get(engine_like_image).id
    assert sidecar.image_id == image_id and sidecar.tag == engine_like_image
    assert sidecar.lock_digest == load_lock().digest
    assert sidecar.archive_bytes == archive.stat().st_size
    assert sidecar.keyid == json.loads((keys / "appliance-ed25519.pub.json").read_text())["keyid"]

    docker_client.images.remove(image_id, force=True)
    assert image_id not in _image_ids(docker_client)

    result = run_cli("pull", "cpu", "--from", str(archive), "--key", str(keys), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "ref": engine_like_image,
        "image_id": image_id,
        "matches": True,
        "from": str(archive),
    }
    assert docker_client.images.get(engine_like_image).id == image_id
    out = docker_client.containers.run(engine_like_image, remove=True, network_mode="none")
    assert out == b"ran\n"


def test_a_tampered_archive_is_refused_before_loading(
    engine_like_image: str, keys: Path, tmp_path: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    archive = tmp_path / "cpu.tar"
    _export(engine_like_image, archive, keys)
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    archive.write_bytes(bytes(data))
    before = _image_ids(docker_client)
    result = run_cli("pull", "cpu", "--from", str(archive), "--key", str(keys))
    assert result.returncode == 3
    assert _one_error_line(result.stderr) == (
        f"error: {archive} differs from the archive its sidecar describes (sha256 "
        f"{read_sidecar(sidecar_path(archive)).archive_sha256[:16]}...): refused, nothing loaded"
    )
    assert _image_ids(docker_client) == before


def test_a_relabelled_image_is_loaded_checked_and_removed_again(
    engine_like_image: str, keys: Path, tmp_path: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    original = docker_client.images.get(engine_like_image)
    labels = {**original.labels, L.SERIES_DIGEST: "0" * 64}
    relabelled = _build(
        docker_client, engine_like_image, labels, f"{REPOSITORY}:relabelled-{secrets.token_hex(4)}"
    )
    archive = tmp_path / "relabelled.tar"
    with open(archive, "wb") as handle:
        for chunk in relabelled.save(named=False):
            handle.write(chunk)
    signer = load_signer(keys)
    record = Sidecar(
        "cpu",
        relabelled.tags[0],
        relabelled.id,
        dict(relabelled.labels),
        load_lock().digest,
        hashlib.sha256(archive.read_bytes()).hexdigest(),
        archive.stat().st_size,
        signer.public_key.keyid,
        {},
    ).record()
    sidecar_path(archive).write_text(json.dumps(sign_sidecar(record, signer)))
    docker_client.images.remove(relabelled.id, force=True)

    result = run_cli("pull", "cpu", "--from", str(archive), "--key", str(keys))
    assert result.returncode == 3
    line = _one_error_line(result.stderr)
    assert "does not match the lock (built with another patch series)" in line
    assert line.endswith(": refused and removed")
    assert relabelled.id not in _image_ids(docker_client)


def test_a_sidecar_from_another_lock_is_refused(
    engine_like_image: str, keys: Path, tmp_path: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    archive = tmp_path / "cpu.tar"
    sidecar = _export(engine_like_image, archive, keys)
    record = {**sidecar.record(), "lock_digest": "ab" * 32}
    sidecar_path(archive).write_text(json.dumps(sign_sidecar(record, load_signer(keys))))
    before = _image_ids(docker_client)
    result = run_cli("pull", "cpu", "--from", str(archive), "--key", str(keys))
    assert result.returncode == 3
    lock12 = load_lock().digest[:12]
    assert _one_error_line(result.stderr) == (
        f"error: sidecar was made for lock abababababab, this lock is {lock12}: refused, nothing loaded"
    )
    assert _image_ids(docker_client) == before


def test_a_sidecar_signed_by_another_key_is_refused(
    engine_like_image: str, keys: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    archive = tmp_path / "cpu.tar"
    sidecar = _export(engine_like_image, archive, keys)
    other = tmp_path_factory.mktemp("other-keys")
    other_id = init_keys(other).keyid
    result = run_cli("pull", "cpu", "--from", str(archive), "--key", str(other))
    assert result.returncode == 3
    assert _one_error_line(result.stderr) == (
        f"error: sidecar signed by key {sidecar.keyid}, not by the given key {other_id}: "
        "refused, nothing loaded"
    )
    copied = tmp_path / "copy.tar"
    shutil.copy(archive, copied)
    missing = run_cli("pull", "cpu", "--from", str(copied), "--key", str(keys))
    assert missing.returncode == 2
    assert _one_error_line(missing.stderr).endswith(
        "copy.tar.sidecar.json: no sidecar (it is written beside the archive by `appliance image export`)"
    )
