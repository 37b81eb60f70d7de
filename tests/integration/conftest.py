"""Integration fixtures: the cpu engine image is built once per run and shared; a local registry
on 127.0.0.1 for the publish and pull tests."""

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, unavailable
from tests.engine_image import engine_image_cpu  # noqa: F401 - a fixture, used by name

REGISTRY_BINARY = "/usr/bin/docker-registry"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a fresh registry with its own storage; stopped after the module."""
    if not Path(REGISTRY_BINARY).exists():
        unavailable("docker-registry not installed (apt-get install docker-registry)")
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
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


@pytest.fixture(scope="module")
def release_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A key directory standing in for the release's key (its private half is the secret)."""
    from appliance.attest.dsse import init_keys

    directory = tmp_path_factory.mktemp("release-key")
    init_keys(directory)
    return directory


@pytest.fixture
def lock_copy(tmp_path: Path, release_key: Path) -> Path:
    """A copy of the repository's lock with `release_key` pinned (same lock digest: keys and
    published images are not the build's identity)."""
    from appliance.engine.lock import load_lock
    from appliance.release.published import pin_release_key

    path = tmp_path / "llama.cpp.lock.json"
    shutil.copy(REPO / "engine" / "llama.cpp.lock.json", path)
    pin_release_key(load_lock(path), release_key)
    assert load_lock(path).digest == load_lock().digest
    return path


def sign_record(
    lock_path: Path, key: Path, target: str, reference: str, image_id: str, labels: dict[str, str]
) -> dict[str, Any]:
    """A record of `reference` for `lock_path`'s lock, signed by `key` as a release would."""
    from appliance.attest.dsse import envelope_for, load_signer
    from appliance.engine.lock import load_lock
    from appliance.release.published import ImageRecord

    record = ImageRecord(target, reference, image_id, labels, load_lock(lock_path).digest, 0)
    return envelope_for(record.statement(), load_signer(key))
