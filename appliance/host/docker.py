"""The local Docker engine and a docker client that can build with BuildKit."""

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from appliance.core.errors import ApplianceError

CLIENT_CANDIDATES = ("docker", "/usr/bin/docker", "/usr/local/bin/docker")
DEFAULT_ENDPOINT = "unix:///var/run/docker.sock"


def docker_endpoint() -> str:
    """Where the SDK connects: DOCKER_HOST, or the default socket; said as such."""
    host = os.environ.get("DOCKER_HOST")
    return f"{host} (DOCKER_HOST)" if host else f"{DEFAULT_ENDPOINT} (default socket)"


def one_line(exc: BaseException, limit: int = 240) -> str:
    """An exception as one short line: its type and first words."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def engine_fix() -> str:
    if os.environ.get("DOCKER_HOST"):
        return (
            "point DOCKER_HOST at a running engine or unset it to use the default socket; "
            "check with `appliance doctor`"
        )
    return (
        "start the engine (e.g. `dockerd &` or `systemctl start docker`; Debian: "
        "apt-get install docker.io) and check with `appliance doctor`"
    )


def connect() -> tuple[Any, str | None]:
    """(client, None) when the engine answers, else (None, why: endpoint and error)."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 - every failure here means "no engine"
        return None, f"Docker engine at {docker_endpoint()} not reachable: {one_line(exc)}"
    return client, None


def engine_problem() -> str | None:
    """Why the Docker engine cannot be used, with the endpoint tried, or None."""
    client, problem = connect()
    if client is not None:
        client.close()
    return problem


def docker_client() -> Any:
    """A connected docker SDK client, or a one-line error saying how to start the engine."""
    client, problem = connect()
    if client is None:
        raise ApplianceError(f"{problem}; {engine_fix()}")
    return client


def _client_version(binary: str) -> str | None:
    try:
        result = subprocess.run(
            [binary, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = result.stdout.strip().splitlines()
    return version[0] if version else None


def _has_buildx(binary: str) -> bool:
    try:
        result = subprocess.run([binary, "buildx", "version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


@cache
def buildkit_client() -> tuple[str, str] | None:
    """(path, how) of a docker CLI that builds with BuildKit, or None.

    A client with the buildx plugin builds with BuildKit by default; clients before 23.0
    (Debian's docker.io) carry BuildKit inside and use it under DOCKER_BUILDKIT=1. Newer
    clients without buildx fall back to the legacy builder, so they do not count.
    """
    seen: set[Path] = set()
    for candidate in CLIENT_CANDIDATES:
        found = shutil.which(candidate)
        if not found or Path(found).resolve() in seen:
            continue
        seen.add(Path(found).resolve())
        if _has_buildx(found):
            return found, "buildx plugin"
        version = _client_version(found)
        if version and version.split(".")[0].isdigit() and int(version.split(".")[0]) < 23:
            return found, f"client {version} with DOCKER_BUILDKIT=1"
    return None
