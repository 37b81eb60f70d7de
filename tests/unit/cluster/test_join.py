"""`appliance cluster join` builds a `ray start` that registers the node's targets."""

import json
from pathlib import Path

import pytest

from appliance.cluster.join import node_environment, parse_images, ray_start_command
from appliance.cluster.resources import NODE_IMAGES_ENV, targets_of
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_a_worker_registers_one_unit_per_target() -> None:
    argv = ray_start_command(
        "192.0.2.1:6379",
        ["cpu", "sm120"],
        head=False,
        node_ip="192.0.2.2",
        num_cpus=1,
        object_store_bytes=100_000_000,
    )
    assert argv[1] == "start" and "--head" not in argv
    assert json.loads(option(argv, "--resources")) == {"appliance-cpu": 1, "appliance-sm120": 1}
    assert option(argv, "--address") == "192.0.2.1:6379"
    assert option(argv, "--node-ip-address") == "192.0.2.2"
    assert option(argv, "--object-store-memory") == "100000000"
    assert targets_of({"appliance-cpu": 1.0, "appliance-sm120": 1.0, "CPU": 1.0}) == ["cpu", "sm120"]


def test_a_head_listens_on_the_address_port_without_a_dashboard(tmp_path: Path) -> None:
    argv = ray_start_command(
        "127.0.0.1:6390",
        ["cpu"],
        head=True,
        node_ip=None,
        num_cpus=1,
        object_store_bytes=None,
        temp_dir=tmp_path,
    )
    assert option(argv, "--port") == "6390"
    assert option(argv, "--node-ip-address") == "127.0.0.1"
    assert "--include-dashboard=false" in argv and "--address" not in argv
    assert option(argv, "--temp-dir") == str(tmp_path)
    with pytest.raises(ApplianceError, match="expected HOST:PORT"):
        ray_start_command("localhost", ["cpu"], head=True, node_ip=None, num_cpus=1, object_store_bytes=None)


def test_image_choices_are_checked_and_travel_in_the_environment() -> None:
    lock = load_lock()
    images = parse_images(("cpu=moe-expert-cache:mine",), lock)
    assert node_environment(images) == {NODE_IMAGES_ENV: '{"cpu": "moe-expert-cache:mine"}'}
    assert node_environment({}) == {}
    with pytest.raises(ApplianceError, match="expected TARGET=TAG"):
        parse_images(("sm75=x",), lock)
