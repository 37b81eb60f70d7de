"""Real Docker: a container of each kind, started through its configure hook and the one
lifecycle, carries the hardening in its HostConfig and is gone once its block ends, Ctrl-C
included; the self-test and the provenance probe leave no container behind."""

import time
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from appliance.attest.provenance import collect_image_provenance, probe_spec
from appliance.host.containers import Kind, Lifecycle
from appliance.images.selftest import selftest, selftest_spec
from appliance.runs.device_server import server_spec
from appliance.runs.memory_points import SweepLimit
from appliance.runs.plan import ContainerSettings, LlamaMoeTraceEngine, container_spec, sweep_plan
from appliance.runs.profile import load_profile
from appliance.runs.trial import TrialContainer


def trial_spec(image: str, tmp_path: Path) -> dict[str, Any]:
    profile = load_profile("tiny-oversub")
    trial = sweep_plan(profile, [SweepLimit(100 << 20, "100MiB")], repeats=1)[0]
    models, results = tmp_path / "models", tmp_path / "results"
    models.mkdir()
    results.mkdir()
    settings = ContainerSettings(models_dir=models, block_device=None, cgroup_version=2, gpu_device_ids=None)
    name = f"appliance-lifecycle-test-{time.monotonic_ns()}"
    return container_spec(profile, LlamaMoeTraceEngine(image), trial, settings, results, name, {})


def assert_hardened(client: Any, container_id: str) -> dict[str, Any]:
    host = client.api.inspect_container(container_id)["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["ReadonlyRootfs"] is True
    assert not host["Privileged"] and not host["CapAdd"]
    return dict(host)


def assert_gone(client: Any, container_id: str) -> None:
    with pytest.raises(docker.errors.NotFound):
        client.api.inspect_container(container_id)


@pytest.mark.parametrize("kind", list(Kind))
def test_each_kind_is_hardened_and_removed_after_ctrl_c(
    kind: Kind, docker_client: Any, runtime_base_image: str, tmp_path: Path
) -> None:
    spec = {
        Kind.TRIAL: lambda: trial_spec(runtime_base_image, tmp_path),
        Kind.SELFTEST: lambda: selftest_spec(runtime_base_image),
        Kind.PROBE: lambda: probe_spec(docker_client.images.get(runtime_base_image).id, ["/bin/sh"], None),
        # the runtime base has no ggml-rpc-server: the same spec idles instead
        Kind.DEVICE_SERVER: lambda: {
            **server_spec(
                runtime_base_image, f"appliance-device-test-{time.monotonic_ns()}", {}, 64 << 20, "0:0"
            ),
            "command": ["sh", "-c", "sleep 60"],
        },
    }[kind]()
    box = (
        TrialContainer(docker_client, spec["name"]) if kind is Kind.TRIAL else Lifecycle(docker_client, kind)
    )
    with pytest.raises(KeyboardInterrupt), box:
        box.start(spec)
        assert box.id is not None
        host = assert_hardened(docker_client, box.id)
        if kind is Kind.DEVICE_SERVER:  # its memory limit is the device's size
            assert host["Memory"] == host["MemorySwap"] == 64 << 20
        if kind is Kind.TRIAL:  # the trial's own configuration arrived too
            assert host["Memory"] == host["MemorySwap"] == 100 << 20
            assert f"{tmp_path / 'models'}:/models:ro" in host["Binds"]
        raise KeyboardInterrupt
    assert box.removed
    assert_gone(docker_client, box.id)


def containers_of(client: Any, image: str, since_ns: int) -> tuple[set[str], set[str]]:
    """(created, destroyed) ids of containers of `image` (as it was named at create) since then."""
    created, destroyed = set(), set()
    since, until = since_ns // 10**9 - 1, int(time.time()) + 1
    for event in client.events(since=since, until=until, decode=True, filters={"type": "container"}):
        if event["timeNano"] < since_ns or event["Actor"]["Attributes"].get("image") != image:
            continue
        if event["Action"] == "create":
            created.add(event["Actor"]["ID"])
        elif event["Action"] == "destroy":
            destroyed.add(event["Actor"]["ID"])
    return created, destroyed


def test_the_probe_and_the_self_test_leave_no_container(docker_client: Any, runtime_base_image: str) -> None:
    image_id = docker_client.images.get(runtime_base_image).id
    since = time.time_ns()
    provenance = collect_image_provenance(docker_client, runtime_base_image, ["/bin/sh", "/no/such"])
    assert provenance["binaries"]["/no/such"] == {"absent": True}
    assert len(provenance["binaries"]["/bin/sh"]["sha256"]) == 64
    checks = selftest(runtime_base_image, docker_client)
    assert [c.ok for c in checks if c.name == "non-root user"] == [False]  # the base image runs as root
    probed, probe_gone = containers_of(docker_client, image_id, since)
    tested, test_gone = containers_of(docker_client, runtime_base_image, since)
    assert len(probed) == 1 and probed == probe_gone
    assert len(tested) == 1 and tested == test_gone
