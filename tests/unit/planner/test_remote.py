"""Planning a GGUF on a web server reads only its header, through range requests."""

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from appliance.core.errors import ApplianceError
from appliance.models.gguf_header import CHUNK
from appliance.planner.accounting import account_file, account_source
from appliance.planner.remote import HttpRangeSource
from tests.conftest import run_cli
from tests.models import tiny_model

RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class Served:
    """A file behind a local HTTP server that counts every body byte it hands to the socket."""

    def __init__(self, path: Path, ranges: bool) -> None:
        self.path, self.ranges = path, ranges
        self.bytes_sent = 0
        self.requests = 0


def handler_for(served: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            data = served.path.read_bytes()
            served.requests += 1
            match = RANGE.fullmatch(self.headers.get("Range", ""))
            if served.ranges and match:
                start = int(match.group(1))
                end = min(int(match.group(2) or len(data) - 1), len(data) - 1)
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.end_headers()
                    return
                body = data[start : end + 1]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            else:
                body = data
                self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # counted before the write: the client may have read the body (and the test
            # compared the counts) before this thread runs again
            served.bytes_sent += len(body)
            # the client may stop reading a body it did not ask for
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def model() -> Path:
    return tiny_model("qwen35moe", size="64MiB")


def serve(served: Served) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(served))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{served.path.name}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def ranged(model: Path) -> Iterator[tuple[str, Served]]:
    served = Served(model, ranges=True)
    for url in serve(served):
        yield url, served


@pytest.fixture()
def unranged(model: Path) -> Iterator[tuple[str, Served]]:
    served = Served(model, ranges=False)
    for url in serve(served):
        yield url, served


def test_remote_accounting_reads_only_the_header(model: Path, ranged: tuple[str, Served]) -> None:
    url, served = ranged
    source = HttpRangeSource(url)
    remote = account_source(source)
    local = account_file(model)
    assert remote.groups == local.groups
    assert remote.file_size == local.file_size == model.stat().st_size
    assert not remote.partial
    assert served.bytes_sent == source.bytes_fetched
    assert served.bytes_sent <= local.header_bytes + CHUNK
    assert served.bytes_sent < model.stat().st_size // 16


def test_plan_from_url_matches_plan_from_file(model: Path, ranged: tuple[str, Served]) -> None:
    url, served = ranged
    remote = run_cli("plan", url, "--ram", "32MiB", "--vram", "0", "--json")
    local = run_cli("plan", str(model), "--ram", "32MiB", "--vram", "0", "--json")
    assert remote.returncode == local.returncode == 1  # 32 MiB cannot hold the working set
    assert "does not start" in remote.stderr
    remote_doc, local_doc = json.loads(remote.stdout), json.loads(local.stdout)
    assert remote_doc["plan"]["budget"] == local_doc["plan"]["budget"]
    assert remote_doc["accounting"]["groups"] == local_doc["accounting"]["groups"]
    assert served.bytes_sent <= local_doc["accounting"]["header_bytes"] + CHUNK


def test_server_without_ranges_is_refused_with_the_download_offer(unranged: tuple[str, Served]) -> None:
    url, served = unranged
    with pytest.raises(
        ApplianceError,
        match=r"does not support range requests \(answered 200 "
        r"to a Range request\).*download the file "
        r"\(\d+\.\d+ MiB\)",
    ):
        account_source(HttpRangeSource(url))
    assert served.requests == 1
