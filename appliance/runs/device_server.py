"""The stand-in GPU of a trial (`gpu: stand-in`): llama.cpp's RPC backend. `ggml-rpc-server`
serves the engine image's CPU backend as a device of type GPU with its own memory (its
process's), its own buffers and its own transfers; the engine reaches it with `--rpc` and
places layers on it (`RPC0`) as it would on `CUDA0`.

One server container per trial, from the engine's own image, started before the engine and
removed with it. It has no network (loopback only, `HARDENING`); the engine's container joins
its network namespace (`containers.SHARED_NETWORK`), so the two share a loopback interface and
nothing else. Its cgroup memory limit is the profile's `limits.vram`: that is the device's size.
The server itself reports the host's free memory as the device's (b10229 has no option to
report less), so the planner and the budget check read the budget from the profile, never from
the device, and the server's cgroup peak is the device memory the trial used.
"""

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from appliance.core.errors import ApplianceError
from appliance.host.containers import SHARED_NETWORK, Kind, Lifecycle, hardened
from appliance.images import labels as L

RPC_BACKEND = "rpc"  # its name in an image's DEVICE_BACKENDS label
RPC_PORT = 50052  # ggml-rpc-server's default
RPC_ENDPOINT = f"127.0.0.1:{RPC_PORT}"
SERVER_COMMAND = ("ggml-rpc-server", "-H", "127.0.0.1", "-p", str(RPC_PORT))
READY_TIMEOUT_S = 30.0
POLL_S = 0.05
LISTEN = "0A"  # a TCP socket's state in /proc/net/tcp: listening
LOOPBACK = ("0100007F", "00000000000000000000000001000000")  # 127.0.0.1 and ::1 in /proc/net/tcp{,6}
LOG_TAIL_LINES = 5


class DeviceServerError(ApplianceError):
    """The stand-in device did not come up as it must: the trial fails with this line."""


def engine_args() -> tuple[str, ...]:
    """The engine's options that add the stand-in device."""
    return ("--rpc", RPC_ENDPOINT)


def server_name(trial_container: str) -> str:
    return f"{trial_container}-device"


def server_spec(
    image: str, name: str, labels: Mapping[str, str], vram_bytes: int, user: str
) -> dict[str, Any]:
    """The device kind's configure hook (host.containers): the hardened keyword arguments of
    one trial's device server; its memory limit (no swap) is the device's size."""
    return hardened(
        Kind.DEVICE_SERVER,
        {
            "image": image,
            "command": list(SERVER_COMMAND),
            "name": name,
            "labels": dict(labels),
            "detach": True,
            "user": user,
            "mem_limit": vram_bytes,
            "memswap_limit": vram_bytes,
        },
    )


def joined(spec: Mapping[str, Any], server: str) -> dict[str, Any]:
    """A trial's spec joined to its device server's network namespace (the trial's lifecycle
    checks it against the hardening when it starts the container)."""
    return {**spec, "network_mode": f"{SHARED_NETWORK}{server}"}


def check_image(image: str, labels: Mapping[str, str]) -> None:
    """An image whose build has no RPC backend cannot serve the stand-in: one line."""
    if RPC_BACKEND not in (labels.get(L.DEVICE_BACKENDS) or "").split(","):
        raise ApplianceError(
            f"image {image} has no stand-in device backend (label {L.DEVICE_BACKENDS} lacks "
            f"{RPC_BACKEND!r}: built before -DGGML_RPC=ON): "
            "rebuild it with `appliance image build --target cpu`"
        )


def listening(net_tcp: str, port: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) listening on `port`."""
    found = []
    for line in net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
            found.append(fields[1].rsplit(":", 1)[0])
    return found


def log_tail(container: Any) -> str:
    text = container.logs(stdout=True, stderr=True).decode(errors="replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-LOG_TAIL_LINES:])


class DeviceServer(Lifecycle):
    """One trial's device server, from start to removal (the `with` block's end, always).
    `start_ready` starts it and waits until it listens on loopback; `collect` reads its cgroup
    and state into a record while it still exists."""

    def __init__(self, client: Any, name: str) -> None:
        super().__init__(client, Kind.DEVICE_SERVER, name)
        self.container: Any = None

    def start_ready(self, spec: Mapping[str, Any], timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the server; return once it listens on 127.0.0.1:RPC_PORT. A server that exits
        first, does not listen in time, or listens anywhere but loopback is one line."""
        self.container = self.start(spec)
        deadline = time.monotonic() + timeout_s
        while True:
            self.container.reload()
            state = self.container.attrs["State"]
            if self.container.status not in ("created", "running"):
                raise DeviceServerError(
                    f"the stand-in device server did not start (exit status {state.get('ExitCode')}): "
                    f"{log_tail(self.container) or 'no output'}"
                )
            pid = state.get("Pid") or 0
            addresses = self._listening(pid)
            if addresses:
                others = [a for a in addresses if a not in LOOPBACK]
                if others:
                    raise DeviceServerError(
                        f"the stand-in device server listens on {', '.join(others)} besides loopback: "
                        "it must listen on 127.0.0.1 only"
                    )
                return
            if time.monotonic() > deadline:
                raise DeviceServerError(
                    f"the stand-in device server did not listen on {RPC_ENDPOINT} within {timeout_s:.0f} s: "
                    f"{log_tail(self.container) or 'no output'}"
                )
            time.sleep(POLL_S)

    @staticmethod
    def _listening(pid: int) -> list[str]:
        if not pid:
            return []
        found = []
        for table in ("tcp", "tcp6"):
            try:
                found += listening(Path(f"/proc/{pid}/net/{table}").read_text(), RPC_PORT)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        return found

    def collect(self, vram_bytes: int) -> dict[str, Any]:
        """The server's record (trial.json `device_server`): its endpoint and memory limit, its
        cgroup's peak (the device memory the trial used) while it runs, and how it ended."""
        from appliance.host.cgroups import read_accounting

        record: dict[str, Any] = {
            "backend": RPC_BACKEND,
            "endpoint": RPC_ENDPOINT,
            "memory_limit": vram_bytes,
        }
        if self.container is None:
            return record
        self.container.reload()
        state = self.container.attrs["State"]
        running = self.container.status == "running"
        if running and state.get("Pid"):
            try:
                accounting = read_accounting(state["Pid"])
                record["peak_bytes"] = accounting.get("peak_bytes")
                record["oom_kills"] = accounting.get("oom_kills")
            except (FileNotFoundError, ProcessLookupError, KeyError) as exc:
                record["cgroup_error"] = f"cgroup unreadable: {exc}"
        record["running_at_end"] = running
        if not running:
            record["exit_code"] = state.get("ExitCode")
        record["oom_killed"] = bool(state.get("OOMKilled")) or bool(record.get("oom_kills"))
        record["log_tail"] = log_tail(self.container)
        return record


def server_failure(record: Mapping[str, Any]) -> str | None:
    """Why the trial failed on its device's side, or None: the server died during the trial."""
    if record.get("running_at_end", True):
        return None
    if record.get("oom_killed"):
        return (
            f"the stand-in device server was OOM-killed: its {record.get('memory_limit')} bytes "
            "(limits.vram) hold less than the placement put on the device; lower -ngl or raise limits.vram"
        )
    return (
        f"the stand-in device server exited (status {record.get('exit_code')}) during the trial: "
        f"{record.get('log_tail') or 'no output'}"
    )
