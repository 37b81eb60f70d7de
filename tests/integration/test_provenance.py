"""Image provenance resolved inside a real container; host facts from the real engine."""

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import init_keys
from appliance.attest.provenance import (
    collect_image_provenance,
    collect_provenance,
    collect_run_provenance,
    host_facts,
    write_provenance,
)
from appliance.attest.verify import Verdict, verify_bundle
from tests.fake_run import make_run

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def base_image(runtime_base_image: str) -> str:
    return runtime_base_image


def sha256_in_image(client: Any, image: str, path: str) -> str:
    """Digest of a file copied out of a stopped container: independent of the probe script."""
    container = client.containers.create(image, ["true"])
    try:
        stream, _ = container.get_archive(path)
        data = b"".join(stream)
    finally:
        container.remove(force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = archive.next()
        assert member is not None
        handle = archive.extractfile(member)
        assert handle is not None
        return hashlib.sha256(handle.read()).hexdigest()


def test_binary_and_libraries_hashed_inside_the_image(docker_client: Any, base_image: str) -> None:
    record = collect_image_provenance(docker_client, base_image, ["/usr/bin/ls"])
    assert record["id"] == docker_client.images.get(base_image).id
    ls = record["binaries"]["/usr/bin/ls"]
    assert ls["sha256"] == sha256_in_image(docker_client, base_image, "/usr/bin/ls")
    libc = ls["libraries"]["libc.so.6"]
    assert libc["path"].endswith("/libc.so.6")
    assert libc["sha256"] == sha256_in_image(docker_client, base_image, libc["path"])
    assert any(name.startswith("/lib64/ld-linux") for name in ls["libraries"])
    assert ls["missing_libraries"] == []


def test_absent_binary_is_recorded_not_raised(docker_client: Any, base_image: str) -> None:
    """A failed run's bundle is still sealed: the provenance says which binary was absent."""
    record = collect_image_provenance(docker_client, base_image, ["/opt/none/llama-simple", "/usr/bin/ls"])
    assert record["binaries"]["/opt/none/llama-simple"] == {"absent": True}
    assert len(record["binaries"]["/usr/bin/ls"]["sha256"]) == 64


def test_host_facts_from_the_engine(docker_client: Any) -> None:
    facts = host_facts(docker_client)
    assert facts["docker_version"] == docker_client.version()["Version"]
    assert facts["cgroup_version"] == (2 if Path("/sys/fs/cgroup/cgroup.controllers").exists() else 1)
    assert facts["ram_bytes"] > 0 and facts["swap_bytes"] >= 0
    assert isinstance(facts["gpus"], list)


def test_bundle_with_image_provenance_verifies(tmp_path: Path, docker_client: Any, base_image: str) -> None:
    run = make_run(tmp_path)
    image = collect_image_provenance(docker_client, base_image, ["/usr/bin/ls"])
    write_provenance(run, collect_provenance(run, host_facts(docker_client), image))
    pair = init_keys(tmp_path / "keys")
    finalize_bundle(run, pair.private)
    assert verify_bundle(run, pair.public).verdict is Verdict.VERIFIED
    recorded = json.loads((run / "provenance.json").read_text())
    assert (
        recorded["image"]["binaries"]["/usr/bin/ls"]["sha256"] == image["binaries"]["/usr/bin/ls"]["sha256"]
    )
    assert recorded["host"]["docker_version"] == docker_client.version()["Version"]
    assert str(tmp_path) not in (run / "provenance.json").read_text()


def test_run_provenance_resolves_the_image_named_by_run_json(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    run = make_run(tmp_path)
    record = json.loads((run / "run.json").read_text())
    record["image_id"] = docker_client.images.get(base_image).id
    (run / "run.json").write_text(json.dumps(record))
    provenance = collect_run_provenance(run, docker_client, ("/usr/bin/ls",))
    assert provenance["image"]["id"] == record["image_id"]
    assert provenance["run"]["image_id"] == record["image_id"]
    assert "libc.so.6" in provenance["image"]["binaries"]["/usr/bin/ls"]["libraries"]
    engine_less = collect_run_provenance(run, docker_client)["image"]["binaries"]
    assert engine_less["/usr/local/bin/llama-moe-trace"] == {"absent": True}
