"""A server that misbehaves (stalls, drips, resets, lies about ranges) costs one line naming the
URL, within the request deadline, and never more than the header budget."""

import struct
import subprocess
import time

import pytest

from appliance.core.errors import ApplianceError
from appliance.models.gguf_header import CHUNK, HEADER_BUDGET
from appliance.planner.accounting import account_source
from appliance.planner.remote import HttpRangeSource
from fuzz import gguf_cases, remote_server
from tests.conftest import run_cli

WAKEUP_SLACK_S = 2.5  # far below the 5 s a drip takes when only each read is timed


@pytest.fixture(scope="module")
def header(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return gguf_cases.seed_headers(tmp_path_factory.mktemp("seeds"))[0]


def _plan(url: str) -> subprocess.CompletedProcess[str]:
    return run_cli("plan", url, "--ram", "8GiB", "--vram", "0")


def _one_line_naming(result: subprocess.CompletedProcess[str], url: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {url}: "), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_1tb_string_reads_at_most_the_budget_and_fails(header: bytes) -> None:
    parsed = gguf_cases.parse(header)
    name = next(e for e in parsed.entries if e.key == b"general.name")
    name.raw = struct.pack("<Q", 1 << 40) + name.raw[8:]
    body = gguf_cases.encode(parsed) + bytes(3 * CHUNK)  # a file larger than one chunk
    url = remote_server.serve(remote_server.NORMAL, body)
    result = _plan(url)
    _one_line_naming(result, url)
    assert "a string of 1099511627776 bytes" in result.stderr
    sent = remote_server.body_bytes_sent()
    assert 0 < sent <= CHUNK <= HEADER_BUDGET


def test_a_1tb_string_of_unknown_total_stops_at_the_budget(header: bytes) -> None:
    parsed = gguf_cases.parse(header)
    name = next(e for e in parsed.entries if e.key == b"general.name")
    name.raw = struct.pack("<Q", 1 << 40) + name.raw[8:]
    url = remote_server.serve(remote_server.UNKNOWN_TOTAL, gguf_cases.encode(parsed))
    source = HttpRangeSource(url)
    with pytest.raises(ApplianceError, match="header budget"):
        account_source(source)
    assert remote_server.body_bytes_sent() <= HEADER_BUDGET


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        (remote_server.WRONG_START, "refusing a wrong range"),
        (remote_server.LONGER_RANGE, "refusing a wrong range"),
        (remote_server.BAD_CONTENT_RANGE, "not bytes START-END/TOTAL"),
        (remote_server.RESET, "cannot fetch"),
        (remote_server.GARBAGE_STATUS, "cannot fetch"),
        (remote_server.SHORT_BODY, "the connection was cut"),
        (remote_server.SERVER_ERROR, "HTTP 500"),
        (remote_server.REDIRECT_LOOP, "more than 5 redirects"),
        (remote_server.NO_RANGES, "does not support range requests"),
    ],
)
def test_misbehaving_server_is_one_line_naming_the_url(header: bytes, mode: int, message: str) -> None:
    url = remote_server.serve(mode, header + bytes(2 * CHUNK))
    result = _plan(url)
    _one_line_naming(result, url)
    assert message in result.stderr


def test_a_file_that_changes_size_between_requests_is_refused(header: bytes) -> None:
    url = remote_server.serve(remote_server.SIZE_CHANGES, header)
    source = HttpRangeSource(url)
    assert source.read(0, 16) == header[:16]
    with pytest.raises(ApplianceError, match=f"^{url}: the file size changed from "):
        source.read(16, 16)


@pytest.mark.parametrize("mode", [remote_server.STALL, remote_server.DRIP])
def test_a_slow_server_meets_the_whole_request_deadline(header: bytes, mode: int) -> None:
    url = remote_server.serve(mode, header)
    source = HttpRangeSource(url, deadline_s=0.2)
    start = time.monotonic()
    with pytest.raises(ApplianceError, match="no complete answer within 0.2 s") as info:
        account_source(source)
    elapsed = time.monotonic() - start
    assert str(info.value).startswith(f"{url}: no complete answer within 0.2 s")
    # A per-read timeout would let the drip (a byte every 0.05 s, 5 s per request) and the
    # stall run on; the whole request's deadline ends both at 0.2 s (slack: a loaded machine).
    assert 0.19 <= elapsed < 0.2 + WAKEUP_SLACK_S, f"gave up after {elapsed:.2f} s"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://", "not a valid URL"),
        ("http://127.0.0.1:notaport/x.gguf", "not a valid URL"),
        ("http://127.0.0.1:1/x.gguf", "cannot fetch"),
        ("https://[::1/x.gguf", "not a valid URL"),
    ],
)
def test_bad_urls_are_one_line(url: str, message: str) -> None:
    result = _plan(url)
    _one_line_naming(result, url)
    assert message in result.stderr


def test_a_wrong_range_is_not_planned_as_an_empty_model(header: bytes) -> None:
    good = remote_server.serve(remote_server.NORMAL, header)
    assert _plan(good).returncode == 0
    url = remote_server.serve(remote_server.WRONG_START, header)
    result = _plan(url)
    assert result.returncode == 1 and "plan for" not in result.stdout
