"""`appliance cluster join`: `ray start` with the node's targets as custom resources.

The targets come from the same probes as `appliance doctor` (the Docker engine must answer;
NVML's GPUs decide the GPU target); every node also offers `cpu`. Each target becomes the
resource `appliance-<target>: 1`.
"""

import json
import shutil
import sys
from pathlib import Path

from appliance.cluster.resources import NODE_IMAGES_ENV, resource_for
from appliance.core.errors import ApplianceError
from appliance.engine.lock import Lock
from appliance.host.docker import docker_client
from appliance.host.gpu import NvmlUnavailable, detect_gpus, fitting_target


def detect_targets(lock: Lock) -> list[str]:
    docker_client()  # a node without a Docker engine can run no trial
    try:
        gpus = detect_gpus()
    except NvmlUnavailable:
        gpus = []
    gpu_target = fitting_target(gpus, lock) if gpus else "cpu"
    return sorted({"cpu", gpu_target})


def parse_images(values: tuple[str, ...], lock: Lock) -> dict[str, str]:
    images = {}
    for value in values:
        target, sep, tag = value.partition("=")
        if not sep or not tag or target not in lock.targets:
            raise ApplianceError(
                f"--image {value}: expected TARGET=TAG with TARGET one of {', '.join(sorted(lock.targets))}"
            )
        images[target] = tag
    return images


def ray_executable() -> str:
    beside = Path(sys.executable).parent / "ray"
    found = str(beside) if beside.is_file() else shutil.which("ray")
    if found is None:
        raise ApplianceError("the `ray` command is missing: pip install 'appliance[cluster]'")
    return found


def ray_start_command(
    address: str,
    targets: list[str],
    *,
    head: bool,
    node_ip: str | None,
    num_cpus: int,
    object_store_bytes: int | None,
    temp_dir: Path | None = None,
) -> list[str]:
    """The `ray start` command line for a head (listening at ADDRESS's port) or a worker."""
    resources = {resource_for(t): 1 for t in targets}
    argv = [
        ray_executable(),
        "start",
        "--num-cpus",
        str(num_cpus),
        "--resources",
        json.dumps(resources, sort_keys=True),
        "--disable-usage-stats",
    ]
    if head:
        host, _, port = address.rpartition(":")
        if not port.isdigit():
            raise ApplianceError(f"--head {address}: expected HOST:PORT to listen on")
        argv += ["--head", "--port", port, "--include-dashboard=false"]
        node_ip = node_ip or host or None
    else:
        argv += ["--address", address]
    if node_ip:
        argv += ["--node-ip-address", node_ip]
    if object_store_bytes:
        argv += ["--object-store-memory", str(object_store_bytes)]
    if temp_dir is not None:
        argv += ["--temp-dir", str(temp_dir)]
    return argv


def node_environment(images: dict[str, str]) -> dict[str, str]:
    return {NODE_IMAGES_ENV: json.dumps(images, sort_keys=True)} if images else {}
