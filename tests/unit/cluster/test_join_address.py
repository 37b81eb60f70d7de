"""`cluster join` checks ADDRESS itself, before Ray or Docker is asked (Ray would start a head
on port 99999): a host name, an IPv4 or a bracketed IPv6 address, a port from 1 to 65535. A
`ray start` that fails is one line with its last line and the log's path, never Ray's
traceback, and one that runs past its deadline is stopped; a worker's join to an address where
nothing listens is refused before Ray is asked."""

import re
import socket
import sys
import time
from pathlib import Path

import pytest

from appliance.cluster.join import check_head_answers, parse_address, ray_executable, run_ray_start
from appliance.core.errors import ApplianceError, ConfigError
from tests.conftest import run_cli


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:6379", ("127.0.0.1", 6379)),
        ("localhost:1", ("localhost", 1)),
        ("node-7.lab.example:65535", ("node-7.lab.example", 65535)),
        ("[::1]:6379", ("::1", 6379)),
        ("[fe80:0:0::1]:10001", ("fe80::1", 10001)),
    ],
)
def test_good_addresses(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


BAD = {
    "127.0.0.1:99999": "ADDRESS: port '99999' is not a number from 1 to 65535",
    "127.0.0.1:0": "ADDRESS: port '0' is not a number from 1 to 65535",
    "127.0.0.1:-1": "ADDRESS: port '-1' is not a number from 1 to 65535",
    "127.0.0.1:": "ADDRESS: port '' is not a number from 1 to 65535",
    "": "ADDRESS: empty: expected HOST:PORT (a host name, an IPv4 address or [IPv6]; port 1..65535)",
    "   ": "ADDRESS: empty: expected HOST:PORT",
    "--address=x": "ADDRESS: '--address=x' looks like an option, not an address",
    "x": "ADDRESS: 'x' has no port: expected HOST:PORT",
    ":6379": "ADDRESS: no host: expected HOST:PORT",
    "::1:6379": "ADDRESS: '::1:6379': write an IPv6 address in brackets, [::1]:6379",
    "[::1]6379": "ADDRESS: '[::1]6379': expected [IPV6]:PORT",
    "[1.2.3.4]:80": "ADDRESS: '1.2.3.4' is not an IPv6 address",
    "300.1.1.1:80": "ADDRESS: '300.1.1.1' is not a host name, an IPv4 or an IPv6 address",
    "bad_host:80": "ADDRESS: 'bad_host' is not a host name, an IPv4 or an IPv6 address",
    "host\x1b[2J:80": "ADDRESS: 'host\\\\x1b[2J' is not a host name",
    "127.0.0.1:６３７９": "ADDRESS: port '６３７９' is not a number from 1 to 65535",
}


@pytest.mark.parametrize("address", sorted(BAD))
def test_bad_addresses_are_one_line(address: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(BAD[address])) as info:
        parse_address(address)
    assert str(info.value).startswith(BAD[address]) and "\n" not in str(info.value)


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "", "--address=x"])
@pytest.mark.parametrize("head", [False, True])
def test_the_cli_refuses_before_ray_or_docker(address: str, head: bool) -> None:
    args = ["cluster", "join", "--dry-run", *(["--head"] if head else []), "--", address]
    result = run_cli(*args, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    what = "--head ADDRESS" if head else "ADDRESS"
    assert result.stderr.startswith(f"error: {what}: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_the_cli_checks_the_node_ip_address() -> None:
    result = run_cli("cluster", "join", "127.0.0.1:6379", "--node-ip-address", "999.1.1.1", "--dry-run")
    assert result.returncode == 2
    assert result.stderr == (
        "error: --node-ip-address: '999.1.1.1' is not a host name, an IPv4 or an IPv6 address\n"
    )


def test_a_failing_ray_start_is_one_line_without_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))
    argv = [ray_executable(), "start", "--head", "--port", "6399", "--resources", "not json"]
    argv += ["--temp-dir", str(tmp_path / "ray"), "--disable-usage-stats", "--include-dashboard=false"]
    with pytest.raises(ApplianceError, match=r"^ray start failed \(exit 1\): ") as info:
        run_ray_start(argv, {})  # real Ray, refusing its own argument before it starts anything
    message = str(info.value)
    log = tmp_path / "cache" / "cluster" / "ray-start.log"
    assert message.startswith("ray start failed (exit 1): ") and message.endswith(
        f"its whole output is in {log}"
    )
    assert "\n" not in message and "Traceback" not in message
    assert "not json" in log.read_text()  # what Ray said is kept, not printed


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends


def test_a_worker_join_to_a_closed_port_is_one_line_before_ray_is_asked() -> None:
    port = _closed_port()
    result = run_cli("cluster", "join", f"127.0.0.1:{port}", timeout=120)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr == (
        f"error: no Ray head answers at 127.0.0.1:{port} (Connection refused): start it there first "
        f"with `appliance cluster join --head 127.0.0.1:{port}`, or check the address\n"
    )


def test_the_head_probe_accepts_a_listening_port() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        check_head_answers("127.0.0.1", int(listener.getsockname()[1]))  # no error


def test_a_ray_start_past_its_deadline_is_stopped_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))
    argv = [sys.executable, "-c", "import time; print('still connecting', flush=True); time.sleep(60)"]
    started = time.monotonic()
    with pytest.raises(ApplianceError, match=r"^ray start did not finish within 1 s") as info:
        run_ray_start(argv, {}, deadline_s=1.0)
    assert time.monotonic() - started < 30
    log = tmp_path / "cache" / "cluster" / "ray-start.log"
    assert str(info.value) == f"ray start did not finish within 1 s and was stopped; its output is in {log}"
    assert "still connecting" in log.read_text()
