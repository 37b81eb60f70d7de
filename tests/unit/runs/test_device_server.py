"""The stand-in device's container and checks (appliance.runs.device_server), without Docker:
its spec, the engine's joined spec, listening sockets read from a real /proc table, and the
one-line failures."""

import dataclasses
import socket
from pathlib import Path

import pytest

from appliance.core.errors import ApplianceError
from appliance.host.containers import HARDENING, Kind, hardened
from appliance.images import labels as L
from appliance.runs import device_server as D
from appliance.runs.memory_points import SweepLimit
from appliance.runs.plan import (
    ContainerSettings,
    LlamaMoeTraceEngine,
    container_spec,
    docker_cli_equivalent,
    sweep_plan,
)
from appliance.runs.profile import load_profile
from tests.unit.runs.test_profile import _write


def test_the_server_is_hardened_and_its_memory_limit_is_the_device_budget() -> None:
    spec = D.server_spec("img:tag", "trial-1-device", {"k": "v"}, 64 << 20, "1000:1000")
    assert {k: spec[k] for k in HARDENING} == dict(HARDENING)  # network none: loopback only
    assert spec["mem_limit"] == spec["memswap_limit"] == 64 << 20
    assert spec["command"] == ["ggml-rpc-server", "-H", "127.0.0.1", "-p", str(D.RPC_PORT)]
    assert D.engine_args() == ("--rpc", f"127.0.0.1:{D.RPC_PORT}")


def test_a_trial_joins_only_its_device_servers_namespace(tmp_path: Path) -> None:
    profile = load_profile(
        str(_write(tmp_path, lambda r: r.update(gpu="stand-in") or r["limits"].update(vram="64MiB")))
    )
    trial = sweep_plan(profile, [SweepLimit(100 << 20, "100MiB")], repeats=1)[0]
    settings = ContainerSettings(
        models_dir=tmp_path, block_device=None, cgroup_version=2, gpu_device_ids=None
    )
    spec = container_spec(profile, LlamaMoeTraceEngine("img:tag"), trial, settings, tmp_path / "s", "t", {})
    assert spec["network_mode"] == "none"
    command = spec["command"]
    at = command.index("--rpc")
    assert tuple(command[at : at + 2]) == D.engine_args()
    joined = hardened(Kind.TRIAL, D.joined(spec, "t-device"))
    assert joined["network_mode"] == "container:t-device"
    assert {k: joined[k] for k in HARDENING if k != "network_mode"} == {
        k: v for k, v in HARDENING.items() if k != "network_mode"
    }
    assert " --network container:t-device --cap-drop ALL " in docker_cli_equivalent(joined)
    with pytest.raises(ApplianceError, match="spec sets network_mode"):
        hardened(Kind.DEVICE_SERVER, {"image": "i", "network_mode": "container:other"})
    with pytest.raises(ApplianceError, match="spec sets network_mode"):
        hardened(Kind.TRIAL, {"image": "i", "network_mode": "host"})


def test_listening_reads_a_real_loopback_socket_from_proc() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        table = Path("/proc/self/net/tcp").read_text()
        assert D.listening(table, port) == []  # bound, not yet listening
        server.listen(1)
        assert D.listening(Path("/proc/self/net/tcp").read_text(), port) == [D.LOOPBACK[0]]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as anywhere:
        anywhere.bind(("0.0.0.0", 0))
        anywhere.listen(1)
        port = anywhere.getsockname()[1]
        assert D.listening(Path("/proc/self/net/tcp").read_text(), port) == ["00000000"]


def test_an_image_without_the_rpc_backend_is_refused_in_one_line() -> None:
    D.check_image("img", {L.DEVICE_BACKENDS: "rpc"})
    for labels in ({}, {L.DEVICE_BACKENDS: ""}):
        with pytest.raises(ApplianceError, match="^image img has no stand-in device backend") as caught:
            D.check_image("img", labels)
        message = str(caught.value)
        assert "\n" not in message and message.startswith("image img has no stand-in device backend")
        assert message.endswith("rebuild it with `appliance image build --target cpu`")


def test_a_server_that_died_fails_the_trial_with_why() -> None:
    assert D.server_failure({"running_at_end": True, "peak_bytes": 1}) is None
    oom = D.server_failure({"running_at_end": False, "oom_killed": True, "memory_limit": 1024})
    assert oom is not None and oom.startswith("the stand-in device server was OOM-killed: its 1024 bytes")
    died = D.server_failure({"running_at_end": False, "exit_code": 134, "log_tail": "abort"})
    assert died == "the stand-in device server exited (status 134) during the trial: abort"


@pytest.mark.parametrize(
    ("gpu", "env", "op_offload", "expected"),
    [
        ("stand-in", {"LLAMA_MMAP_DEMAND": "1"}, None, True),  # paging on a device: off by default
        ("stand-in", {}, None, False),  # llama.cpp's default elsewhere
        ("stand-in", {"LLAMA_MMAP_DEMAND": "1"}, True, False),  # a variant that asks for it
        ("stand-in", {}, False, True),
        ("required", {"LLAMA_MMAP_DEMAND": "1"}, None, True),
        ("none", {"LLAMA_MMAP_DEMAND": "1"}, None, False),  # no device: the option would say nothing
        ("none", {}, False, False),
    ],
)
def test_paging_variants_on_a_device_run_without_op_offload_unless_they_ask(
    gpu: str, env: dict[str, str], op_offload: bool | None, expected: bool
) -> None:
    profile = load_profile("tiny-oversub")
    variant = dataclasses.replace(profile.variants[0], env=env, op_offload=op_offload)
    profile = dataclasses.replace(profile, gpu=gpu)
    argv = LlamaMoeTraceEngine("img").argv(profile, variant)
    assert ("--no-op-offload" in argv) is expected
    assert variant.no_op_offload(gpu) is expected
