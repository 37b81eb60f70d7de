"""A Ray cluster of several nodes on this machine, inside a network namespace with only `lo`.

Ray advertises the machine's interface address even with --node-ip-address=127.0.0.1; in a
namespace of its own (`unshare -n`, then lo brought up as `ip link set lo up` would, without
needing iproute2) there is no other address, so all cluster traffic stays on 127.0.0.1. The
Docker engine is still reached through its unix socket. Nodes join with
`appliance cluster join`; drivers run inside the same namespace (`nsenter --net`). `stop()`
ends every process in the namespace by pid (never `ray stop`, which would end Ray processes
of the whole machine).
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import REPO, sigint_default

PORT = 6379
ADDRESS = f"127.0.0.1:{PORT}"
OBJECT_STORE_BYTES = 100_000_000
HOLD_S = 3600  # the namespace's holder ends by itself if a test run dies without stop()
# `ip link set lo up` without iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP; then the
# holder sleeps, keeping the namespace alive.
HOLDER = f"""
import fcntl, os, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH14s", b"lo", 0, bytes(14)))[:18])[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, bytes(14)))
os.execvp("sleep", ["sleep", "{HOLD_S}"])
"""
LIST_INTERFACES = "import socket; print(' '.join(name for _, name in socket.if_nameindex()))"
UP_CHECK = "import socket; socket.create_server(('127.0.0.1', 0)).close()"


def namespaces_available() -> str | None:
    """None when unshare/nsenter/ip exist and this user may create a network namespace."""
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (util-linux)"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    return None


class LoopbackCluster:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            **(env or {}),
        }
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # socket paths stay short
        self.holder: subprocess.Popen[bytes] | None = None

    # namespace -----------------------------------------------------------------------------
    def start_namespace(self) -> None:
        self.holder = subprocess.Popen(["unshare", "-n", sys.executable, "-c", HOLDER])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.holder.poll() is not None:
                raise RuntimeError("the network namespace's holder exited")
            up = subprocess.run(self.enter([sys.executable, "-c", UP_CHECK]), capture_output=True)
            if up.returncode == 0 and self.netns() != Path("/proc/self/ns/net").readlink().name:
                return
            time.sleep(0.2)
        raise RuntimeError("loopback did not come up in the network namespace")

    def netns(self) -> str:
        assert self.holder is not None
        return Path(f"/proc/{self.holder.pid}/ns/net").readlink().name

    def enter(self, argv: list[str]) -> list[str]:
        assert self.holder is not None
        return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", *argv]

    def interfaces(self) -> list[str]:
        """The network interfaces inside the namespace."""
        return subprocess.run(
            self.enter([sys.executable, "-c", LIST_INTERFACES]), capture_output=True, text=True, check=True
        ).stdout.split()

    # nodes and drivers ---------------------------------------------------------------------
    def appliance(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.enter([sys.executable, "-m", "appliance", *args]),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=REPO,
            timeout=timeout,
        )

    def driver(self, *args: str) -> subprocess.Popen[str]:
        """`appliance ARGS` inside the namespace, its output readable line by line."""
        return subprocess.Popen(
            self.enter([sys.executable, "-m", "appliance", *args]),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
            cwd=REPO,
            preexec_fn=sigint_default,
        )

    def join(self, *, head: bool = False, images: dict[str, str] | None = None) -> None:
        args = [
            "cluster",
            "join",
            ADDRESS,
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            "1",
            "--object-store-memory",
            str(OBJECT_STORE_BYTES),
            "--temp-dir",
            str(self.temp_dir),
        ]
        if head:
            args.append("--head")
        for target, tag in (images or {}).items():
            args += ["--image", f"{target}={tag}"]
        result = self.appliance(*args, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"cluster join failed:\n{result.stdout}\n{result.stderr}")

    def status(self) -> list[dict[str, Any]]:
        result = self.appliance("cluster", "status", "--address", ADDRESS, "--json", timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        reports: list[dict[str, Any]] = json.loads(result.stdout)
        return reports

    # processes -----------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """Every process inside the namespace but its holder."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or (self.holder and int(entry.name) == self.holder.pid):
                continue
            try:
                if (entry / "ns" / "net").readlink().name == self.netns():
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def raylet_pid(self, node_id: str) -> int:
        for pid in self.pids():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"/raylet") and f"--node_id={node_id}".encode() in argv:
                return pid
        raise LookupError(f"no raylet of node {node_id} in the namespace")

    def lose_node(self, node_id: str, meanwhile: Callable[[], None] = lambda: None) -> list[int]:
        """A node's host going away: its raylet and every process under it (workers, agents)
        are frozen (SIGSTOP), `meanwhile` runs (what else the host takes with it), then they
        are killed (SIGKILL). Frozen, none of them can report anything in between. Returns
        the pids killed."""
        parents = {}
        for pid in self.pids():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        doomed = {self.raylet_pid(node_id)}
        grew = True
        while grew:
            below = {pid for pid, parent in parents.items() if parent in doomed} - doomed
            doomed |= below
            grew = bool(below)
        self._signal(doomed, signal.SIGSTOP)
        meanwhile()
        self._signal(doomed, signal.SIGKILL)
        return sorted(doomed)

    @staticmethod
    def _signal(pids: set[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def stop(self) -> None:
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
