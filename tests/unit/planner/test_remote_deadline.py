"""A remote read has an overall deadline and a minimum useful rate besides the per-request
deadline: a 127.0.0.1 server that answers every range request with one byte is refused within
the overall deadline, and the refusal names all three limits. What a server sends that reaches
the terminal (its reason phrase) is escaped."""

import io
import re
import time

import pytest

from appliance.cli.progress import LinePrinter
from appliance.core.errors import ApplianceError
from appliance.core.units import format_size
from appliance.models.gguf_header import CHUNK
from appliance.planner.accounting import account_source
from appliance.planner.remote import HEADER_TASK, HttpRangeSource
from fuzz import gguf_cases, remote_server
from tests.conftest import run_cli

MARGIN_S = 2.0  # one request in flight when the deadline passes, and a loaded machine


@pytest.fixture(scope="module")
def header(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return gguf_cases.seed_headers(tmp_path_factory.mktemp("seeds"))[0]


def test_one_byte_per_range_meets_the_overall_deadline(header: bytes) -> None:
    url = remote_server.serve(remote_server.ONE_BYTE, header + bytes(2 * CHUNK))
    source = HttpRangeSource(url, deadline_s=5, total_deadline_s=3, min_rate=0, rate_grace_s=0)
    start = time.monotonic()
    with pytest.raises(ApplianceError, match="too slow to finish") as info:
        account_source(source)
    elapsed = time.monotonic() - start
    assert elapsed < 3 + MARGIN_S, elapsed
    message = str(info.value)
    assert message.startswith(f"{url}: ") and "\n" not in message
    assert (
        "too slow to finish (limits: 3 s for the whole read, at least 0 B/s after 0 s, 5 s per request)"
        in message
    )
    assert source.requests > 1 and source.bytes_fetched == source.requests  # one byte each, as served


def test_one_byte_per_range_prints_a_line_or_two_to_a_log_not_one_per_request(header: bytes) -> None:
    """Hundreds of one-byte answers in 3 s reach a display that is not a terminal as at most
    a line once the read has run LINE_MIN_SECONDS and a last line where it stopped."""
    url = remote_server.serve(remote_server.ONE_BYTE, header + bytes(2 * CHUNK))
    log = io.StringIO()
    show = LinePrinter(file=log)
    source = HttpRangeSource(url, progress=show, deadline_s=5, total_deadline_s=3, min_rate=0, rate_grace_s=0)
    with pytest.raises(ApplianceError, match="too slow to finish"):
        account_source(source)
    show.finish()
    lines = log.getvalue().splitlines()
    assert source.requests > 50, source.requests
    assert 1 <= len(lines) <= 2, lines
    assert lines[-1].startswith(f"{HEADER_TASK}: {format_size(source.bytes_fetched, trim=True)}, ")


def test_one_byte_per_range_is_refused_by_the_minimum_rate(header: bytes) -> None:
    url = remote_server.serve(remote_server.ONE_BYTE, header + bytes(2 * CHUNK))
    source = HttpRangeSource(url, deadline_s=5, total_deadline_s=60, min_rate=64 << 10, rate_grace_s=1)
    start = time.monotonic()
    with pytest.raises(
        ApplianceError,
        match=r"over \d+ requests, too slow to finish \(limits: 60 s for the whole read, "
        r"at least 64.00 KiB/s after 1 s, 5 s per request\)",
    ):
        account_source(source)
    assert time.monotonic() - start < 1 + MARGIN_S  # the rate, not the 60 s deadline, ended it
    assert source.bytes_fetched < 64 << 10


def test_the_cli_refusal_prints_the_default_limits(header: bytes) -> None:
    url = remote_server.serve(remote_server.NORMAL, header)
    ok = run_cli("plan", url, "--ram", "8GiB", "--vram", "0", timeout=120)
    assert ok.returncode == 0, ok.stderr  # a server that answers properly is unaffected
    url = remote_server.serve(remote_server.SERVER_ERROR, header)
    refused = run_cli("plan", url, "--ram", "8GiB", "--vram", "0", timeout=120)
    assert (
        refused.returncode == 1 and refused.stderr.strip() == f"error: {url}: HTTP 500 Internal Server Error"
    )


def test_a_reason_phrase_with_terminal_escapes_is_escaped(header: bytes) -> None:
    url = remote_server.serve(remote_server.ESCAPES, header)
    with pytest.raises(ApplianceError, match=re.escape(f"{url}: HTTP 404 Not ")) as info:
        account_source(HttpRangeSource(url))
    assert str(info.value) == f"{url}: HTTP 404 Not \\x1b[2J\\x1b]0;owned\\x07Found\\x9b31m"
    result = run_cli("plan", url, "--ram", "8GiB", "--vram", "0", timeout=120)
    assert result.returncode == 1 and "\x1b" not in result.stderr and "\x9b" not in result.stderr
    assert result.stderr.strip() == f"error: {url}: HTTP 404 Not \\x1b[2J\\x1b]0;owned\\x07Found\\x9b31m"


def test_the_cli_reading_one_byte_per_request_prints_two_progress_lines(header: bytes) -> None:
    """`appliance plan URL` into a pipe, against a server that answers each of some 6,600 range
    requests with one byte (about 11 s here): once 6,587 lines on stderr, now where the read
    was at LINE_MIN_SECONDS and where it stopped."""
    url = remote_server.serve(remote_server.ONE_BYTE, header + bytes(2 * CHUNK))
    result = run_cli("plan", url, "--ram", "8GiB", "--vram", "0", timeout=120)
    lines = result.stderr.splitlines()
    progress = [line for line in lines if line.startswith(f"{HEADER_TASK}: ")]
    assert len(progress) <= 2, result.stderr[-2000:]
    # a loaded machine may take past the rate's grace and be refused: then one error line more
    assert lines[: len(progress)] == progress, result.stderr[-2000:]
    assert len(lines) == len(progress) + (result.returncode != 0), result.stderr[-2000:]
