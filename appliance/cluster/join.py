"""`appliance cluster join`: `ray start` with the node's targets as custom resources.

The targets come from the same probes as `appliance doctor` (the Docker engine must answer;
NVML's GPUs decide the GPU target); every node also offers `cpu`. Each target becomes the
resource `appliance-<target>: 1`.
"""

import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from appliance.cluster.resources import NODE_IMAGES_ENV, resource_for
from appliance.core import atomic
from appliance.core.checks import one_line
from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.paths import cache_dir
from appliance.engine.lock import Lock
from appliance.host.docker import docker_client
from appliance.host.gpu import NvmlUnavailable, detect_gpus, fitting_target

HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
MAX_PORT = 65535
ADDRESS_FORM = "HOST:PORT (a host name, an IPv4 address or [IPv6]; port 1..65535)"
HEAD_PROBE_S = 5.0  # a head that does not accept a TCP connection in this long is not there
RAY_START_DEADLINE_S = 300.0


def check_host(host: str, what: str) -> str:
    """host when it is a host name (RFC 1123), an IPv4 or an IPv6 address; one line otherwise."""
    if not host:
        raise ConfigError(f"{what}: no host: expected {ADDRESS_FORM}")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    labels = host.removesuffix(".").split(".")
    numeric = all(label.isdigit() for label in labels)  # 1.2.3.999 is no host name
    if len(host) > 253 or numeric or not all(HOST_LABEL.fullmatch(label) for label in labels):
        raise ConfigError(f"{what}: {one_line(host)!r} is not a host name, an IPv4 or an IPv6 address")
    return host


def parse_address(address: str, what: str = "ADDRESS") -> tuple[str, int]:
    """(host, port) of HOST:PORT or [IPV6]:PORT, checked here rather than by Ray: one line
    for an empty address, an option where an address belongs, a bad host or a port outside
    1..65535."""
    shown = one_line(address)
    if not address.strip():
        raise ConfigError(f"{what}: empty: expected {ADDRESS_FORM}")
    if address.startswith("-"):
        raise ConfigError(f"{what}: {shown!r} looks like an option, not an address: expected {ADDRESS_FORM}")
    if address.startswith("["):
        host, bracket, rest = address[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ConfigError(f"{what}: {shown!r}: expected [IPV6]:PORT")
        port = rest[1:]
        try:
            host = str(ipaddress.IPv6Address(host))
        except ValueError:
            raise ConfigError(f"{what}: {one_line(host)!r} is not an IPv6 address") from None
    else:
        host, sep, port = address.rpartition(":")
        if not sep:
            raise ConfigError(f"{what}: {shown!r} has no port: expected {ADDRESS_FORM}")
        if ":" in host:
            raise ConfigError(
                f"{what}: {shown!r}: write an IPv6 address in brackets, [{one_line(host)}]:{one_line(port)}"
            )
        host = check_host(host, what)
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= MAX_PORT:
        raise ConfigError(f"{what}: port {one_line(port)!r} is not a number from 1 to {MAX_PORT}")
    return host, int(port)


def check_head_answers(host: str, port: int, timeout_s: float = HEAD_PROBE_S) -> None:
    """One line when nothing accepts a TCP connection at the head's address: `ray start`
    would otherwise retry for minutes before it says so."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except TimeoutError:
        why = f"no answer within {timeout_s:g} s"
    except OSError as error:
        why = one_line(error.strerror or type(error).__name__)
    raise ApplianceError(
        f"no Ray head answers at {shown} ({why}): start it there first with "
        f"`appliance cluster join --head {shown}`, or check the address"
    )


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
    host, port = parse_address(address, "--head ADDRESS" if head else "ADDRESS")
    if node_ip is not None:
        node_ip = check_host(node_ip, "--node-ip-address")
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
        argv += ["--head", "--port", str(port), "--include-dashboard=false"]
        node_ip = node_ip or host
    else:
        argv += ["--address", f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    if node_ip:
        argv += ["--node-ip-address", node_ip]
    if object_store_bytes:
        argv += ["--object-store-memory", str(object_store_bytes)]
    if temp_dir is not None:
        argv += ["--temp-dir", str(temp_dir)]
    return argv


def run_ray_start(argv: list[str], env: dict[str, str], deadline_s: float = RAY_START_DEADLINE_S) -> str:
    """Run `ray start`, its output kept in a log: on success its standard output comes back;
    on failure, or past the deadline, one line with its last line (escaped) and the log's
    path, never Ray's traceback."""
    log = cache_dir() / "cluster" / "ray-start.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(
            argv,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
            timeout=deadline_s,
        )
    except subprocess.TimeoutExpired as expired:
        atomic.write_text(log, _text(expired.stdout) + _text(expired.stderr))
        raise ApplianceError(
            f"ray start did not finish within {deadline_s:g} s and was stopped; its output is in {log}"
        ) from None
    output = result.stdout + result.stderr
    atomic.write_text(log, output)
    if result.returncode == 0:
        return result.stdout
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if not line.startswith(("File ", "Traceback"))), "")
    said = f": {one_line(last)[:300]}" if last else ""
    raise ApplianceError(f"ray start failed (exit {result.returncode}){said}; its whole output is in {log}")


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def node_environment(images: dict[str, str]) -> dict[str, str]:
    return {NODE_IMAGES_ENV: json.dumps(images, sort_keys=True)} if images else {}
