"""Every container the appliance starts, one lifecycle.

- The hardening is `HARDENING`, here only: no network, no capabilities, no privilege gain, a
  read-only root filesystem. Every kind takes all of it, with one declared exception: a trial's
  engine may join the network namespace of its own device server (`network_mode:
  container:NAME`, `SHARED_NETWORK`), a container that itself has no network, so the two share a
  loopback interface and nothing else (the stand-in GPU, `runs.device_server`).
- Each `Kind` has a configure hook in its own module that adds only what that kind needs:
  `runs.plan.container_spec` (trial: engine command, memory limits, mounts, env),
  `images.selftest.selftest_spec` (image self-test), `attest.provenance.probe_spec` (provenance
  probe). `hardened` merges the hardening in and refuses a spec that would weaken it.
- One cleanup rule: a `Lifecycle` creates and starts the container and removes it by id when its
  `with` block ends, after success, an error or Ctrl-C alike (by name when Docker never answered
  the create).

No other module calls `containers.run` or `containers.create` (tests/unit/host/test_containers.py
counts the calls). The docker SDK is imported inside functions: importing this module loads no
docker.
"""

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Self

from appliance.core.errors import ApplianceError


class Kind(StrEnum):
    """What a container is for; its configure hook lives with the module that starts it."""

    TRIAL = "trial"
    SELFTEST = "image self-test"
    PROBE = "provenance probe"
    DEVICE_SERVER = "device server"


HARDENING: Mapping[str, Any] = {
    "network_mode": "none",
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "read_only": True,
}
# Keys that would undo the hardening by another road; no configure hook may set them.
WEAKENING = ("network", "cap_add", "privileged", "pid_mode", "ipc_mode", "userns_mode")
# The one exception: a trial joins its device server's namespace (which has only loopback).
SHARED_NETWORK = "container:"


def _allowed(kind: Kind, key: str, value: Any) -> bool:
    if value == HARDENING[key]:
        return True
    return kind is Kind.TRIAL and key == "network_mode" and str(value).startswith(SHARED_NETWORK)


def hardened(kind: Kind, spec: Mapping[str, Any]) -> dict[str, Any]:
    """spec with the hardening added (after its own keys); idempotent. A spec that sets a
    hardening key to something else, or a key that undoes it, is refused; a trial's spec may
    join its device server's network namespace (`SHARED_NETWORK`)."""
    clash = [k for k in HARDENING if k in spec and not _allowed(kind, k, spec[k])]
    clash += [k for k in WEAKENING if k in spec]
    if clash:
        raise ApplianceError(
            f"the {kind} container's spec sets {', '.join(clash)}: the hardening is "
            "appliance/host/containers.py's HARDENING; declare an exception there, with why"
        )
    hardening = {k: spec.get(k, v) if k == "network_mode" else v for k, v in HARDENING.items()}
    return {**spec, **{k: list(v) if isinstance(v, list) else v for k, v in hardening.items()}}


def hardening_cli_args(spec: Mapping[str, Any] | None = None) -> list[str]:
    """The hardening as `docker run` flags, in HARDENING's order (for the printed equivalent),
    with a hardened spec's own network (a trial joined to its device server's)."""
    flags = {"network_mode": "--network", "cap_drop": "--cap-drop", "security_opt": "--security-opt"}
    args: list[str] = []
    for key, value in (HARDENING if spec is None else {k: spec[k] for k in HARDENING}).items():
        if key == "read_only":
            args.append("--read-only")
            continue
        for item in value if isinstance(value, list) else [value]:
            args += [flags[key], item]
    return args


class Lifecycle:
    """One container from `start` to its removal, which leaving the `with` block always does.
    `removed` is set once it is gone (or once a caller gave up on it, see runs.trial)."""

    def __init__(self, client: Any, kind: Kind, name: str | None = None) -> None:
        self.client = client
        self.kind = kind
        self.name = name
        self.id: str | None = None
        self.removed = False

    def __enter__(self) -> Self:
        return self

    def start(self, spec: Mapping[str, Any]) -> Any:
        """Create the container from the hardened spec, then start it; returns the container."""
        full = hardened(self.kind, spec)
        self.name = full.get("name", self.name)
        container = self.client.containers.create(**full)
        self.id = container.id
        container.start()
        return container

    def remove(self) -> None:
        """Remove the container by id (by name if the create never answered), if it exists."""
        import docker.errors

        target = self.id or self.name
        if target is not None:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.remove_container(target, force=True)
        self.removed = True

    def __exit__(self, *exc: object) -> None:
        if not self.removed:
            self.remove()


@dataclass(frozen=True)
class Exited:
    """A container run to its end: exit status, stdout and stderr together, stderr alone."""

    status: int
    output: bytes
    stderr: bytes


def run_to_exit(client: Any, kind: Kind, spec: Mapping[str, Any]) -> Exited:
    """Start a container, wait for it to end, read its logs; it is removed whatever happens."""
    with Lifecycle(client, kind) as box:
        container = box.start(spec)
        status = int(container.wait()["StatusCode"])
        output = container.logs(stdout=True, stderr=True)
        stderr = container.logs(stdout=False, stderr=True) if status else b""
    return Exited(status, output, stderr)
