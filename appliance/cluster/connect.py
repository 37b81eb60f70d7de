"""Connecting the driver to a Ray cluster, and running a function on one given node."""

import logging
import socket
from collections.abc import Callable
from typing import Any

from appliance.core.errors import ApplianceError

REACH_TIMEOUT_S = 5.0


def check_reachable(address: str) -> None:
    """A TCP connection to HOST:PORT (ray:// or not) first: ray.init waits minutes for an
    address nobody listens on."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise ApplianceError(
            f"cannot reach a Ray cluster at {address} ({exc.strerror or exc}): "
            "start its head (docs/cluster.md) or check the address"
        ) from None


def connect(address: str) -> None:
    """ray.init against an existing cluster (`host:port`, `ray://host:port` or `auto`); an
    unreachable address is one line."""
    import ray

    if ray.is_initialized():
        return
    check_reachable(address)
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, configure_logging=True)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ApplianceError(
            f"cannot reach a Ray cluster at {address} ({first[:160]}): start "
            "its head (docs/cluster.md) or check the address"
        ) from None


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [node for node in ray.nodes() if node.get("Alive")]


def on_node(
    node_id: str,
    function: Callable[..., Any],
    *args: Any,
    resources: dict[str, float] | None = None,
    name: str | None = None,
) -> Any:
    """A Ray task of function pinned to node_id (never moved elsewhere); returns its ref."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(function).options(
        num_cpus=0,
        resources=resources or {},
        max_retries=0,
        name=name or function.__name__,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    )
    return remote.remote(*args)
