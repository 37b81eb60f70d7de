"""A local HTTP server on 127.0.0.1 that serves one GGUF per case and misbehaves on request:
ignores Range, sends the wrong range or a short body, drips bytes, stalls, resets the
connection, redirects in a loop, answers garbage, answers each range with one byte, sends a
reason phrase full of terminal escapes. One per worker, started on first use."""

from __future__ import annotations

import os
import random
import re
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CLIENT_DEADLINE_S = 0.3  # what the fuzzed client is given per request
RANGE = re.compile(r"bytes=(\d+)-(\d*)")

(
    NORMAL,
    NO_RANGES,
    WRONG_START,
    UNKNOWN_TOTAL,
    BAD_CONTENT_RANGE,
    SHORT_BODY,
    DRIP,
    STALL,
    RESET,
    SERVER_ERROR,
    ALWAYS_416,
    REDIRECT_LOOP,
    GARBAGE_STATUS,
    LONG_HEADER,
    LONGER_RANGE,
    SIZE_CHANGES,
    ONE_BYTE,
    ESCAPES,
) = range(18)
N_MODES = 18
SLOW = (DRIP, STALL, ONE_BYTE)
ESCAPING_REASON = "Not \x1b[2J\x1b]0;owned\x07Found\x9b31m"  # clears the screen, sets the title
CLIENT_TOTAL_DEADLINE_S = 1.0  # what the fuzzed client is given for the whole read
CLIENT_RATE_GRACE_S = 0.5

_state: dict[str, object] = {"mode": NORMAL, "body": b"", "requests": 0, "sent": 0}
_url: dict[int, str] = {}  # per process: a forked worker starts its own server


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up mid-answer is what these cases are about


def pick_mode(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.5:
        return NORMAL
    if roll < 0.52:
        return rng.choice(SLOW)
    return rng.choice([m for m in range(N_MODES) if m not in SLOW and m != NORMAL])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        mode, body = _state["mode"], _state["body"]
        assert isinstance(body, bytes)
        _state["requests"] = int(str(_state["requests"])) + 1
        match = RANGE.fullmatch(self.headers.get("Range", ""))
        start = int(match.group(1)) if match else 0
        end = min(int(match.group(2) or len(body) - 1), len(body) - 1) if match else len(body) - 1
        total = str(len(body))
        if mode == STALL:
            time.sleep(CLIENT_DEADLINE_S * 10)
            return self._close()
        if mode == RESET:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return self._close()
        if mode == GARBAGE_STATUS:
            self.wfile.write(b"HTTP/9 nonsense\r\n\r\n\x00\xff")
            return self._close()
        if mode == SERVER_ERROR:
            return self._send(500, b"oops", {})
        if mode == ESCAPES:
            return self._send(404, b"", {}, reason=ESCAPING_REASON)
        if mode == ALWAYS_416:
            return self._send(416, b"", {"Content-Range": f"bytes */{total}"})
        if mode == REDIRECT_LOOP:
            return self._send(302, b"", {"Location": self.path})
        if mode == NO_RANGES or not match:
            return self._send(200, body, {})
        if start >= len(body):
            return self._send(416, b"", {"Content-Range": f"bytes */{total}"})
        piece = body[start : end + 1]
        header_start, header_end = start, end
        if mode == WRONG_START:
            header_start = start + 1
            piece = body[start + 1 : end + 1]
        elif mode == UNKNOWN_TOTAL:
            total = "*"
        elif mode == LONGER_RANGE:
            header_end = end + 100
        elif mode == SIZE_CHANGES:
            total = str(len(body) + int(str(_state["requests"])))
        content_range = f"bytes {header_start}-{header_end}/{total}"
        if mode == BAD_CONTENT_RANGE:
            content_range = random.choice(("bytes x-y/z", "", "bytes 0-0/-1", "items 0-1/2"))
        headers = {"Content-Range": content_range}
        if mode == LONG_HEADER:
            headers["X-Long"] = "x" * 70000
        if mode == ONE_BYTE:
            piece, content_range = piece[:1], f"bytes {start}-{start}/{total}"
            headers["Content-Range"] = content_range
        if mode == SHORT_BODY:
            self._send(206, piece[: len(piece) // 2], headers, length=len(piece))
            return self._close()
        if mode == DRIP:
            self._send(206, b"", headers, length=len(piece))
            for byte in piece[:100]:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.05)
            return self._close()
        self._send(206, piece, headers)

    def _send(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str],
        length: int | None = None,
        reason: str | None = None,
    ) -> None:
        try:
            self.send_response(status, reason)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body)
            _state["sent"] = int(str(_state["sent"])) + len(body)
        except OSError:
            self.close_connection = True

    def _close(self) -> None:
        self.close_connection = True


def body_bytes_sent() -> int:
    """Body bytes the server sent since the last `serve` (the drip mode's are not counted)."""
    return int(str(_state["sent"]))


def serve(mode: int, body: bytes) -> str:
    """The URL at which this worker's server now plays `mode` with `body`."""
    _state.update(mode=mode % N_MODES, body=body, requests=0, sent=0)
    pid = os.getpid()
    if pid not in _url:
        server = _Server(("127.0.0.1", 0), _Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        _url[pid] = f"http://127.0.0.1:{server.server_address[1]}/model.gguf"
    return _url[pid]
