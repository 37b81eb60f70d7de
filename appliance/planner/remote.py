"""A GGUF on a web server, read through HTTP range requests: only the header travels.

Each request (connect, redirects, headers and body together) has one deadline, and the whole
read has two more: an overall deadline, and a minimum useful rate (header bytes received per
second, checked once a grace period has passed), so a server that stops answering, drips bytes
or answers every range with one byte cannot hold a plan forever. Every network failure becomes
one line that names the URL, and what the server sent (a reason phrase, a header) is escaped
before it reaches the terminal (core.checks.one_line).
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import threading
import time
import urllib.parse

from appliance.core.checks import one_line
from appliance.core.errors import ApplianceError
from appliance.core.progress import BYTES, Progress, ProgressFn
from appliance.core.units import format_size

CONTENT_RANGE = re.compile(r"bytes (\d{1,19})-(\d{1,19})/(\d{1,19}|\*)")
DEADLINE_S = 60.0  # for one range request, start to last byte
TOTAL_DEADLINE_S = 300.0  # for the whole header read, every request together
MIN_RATE = 16 << 10  # useful bytes per second, averaged over the read once the grace has passed
RATE_GRACE_S = 15.0  # before the rate is judged (a first round trip, a slow start)
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)

# The task a remote read reports its bytes under; how far through the header it is stays
# unknown until the header is parsed, so its records carry no total.
HEADER_TASK = "header bytes fetched (range requests)"


def _split_url(url: str) -> urllib.parse.SplitResult:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ApplianceError(f"{url}: not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ApplianceError(f"{url}: not a valid URL: give http(s)://HOST/PATH")
    return parts


class _Deadline:
    """Closes a connection's socket when time is up, whatever read it is blocked in."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def passed(self) -> bool:
        return self.expired or time.monotonic() >= self.end

    def left(self) -> float:
        return max(self.end - time.monotonic(), 0.001)

    def watch(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._conn = conn

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self._conn.sock if self._conn is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


class HttpRangeSource:
    """Each read is one `Range: bytes=a-b` request; a server that ignores Range is refused."""

    def __init__(
        self,
        url: str,
        progress: ProgressFn | None = None,
        deadline_s: float = DEADLINE_S,
        total_deadline_s: float = TOTAL_DEADLINE_S,
        min_rate: float = MIN_RATE,
        rate_grace_s: float = RATE_GRACE_S,
    ) -> None:
        _split_url(url)
        self.url = url
        self.name = url
        self.bytes_fetched = 0
        self.requests = 0
        self.deadline_s = deadline_s
        self.total_deadline_s = total_deadline_s
        self.min_rate = min_rate
        self.rate_grace_s = rate_grace_s
        self._started: float | None = None
        self._total: int | None = None
        self._progress = progress

    def _limits(self) -> str:
        return (
            f"limits: {self.total_deadline_s:g} s for the whole read, at least "
            f"{format_size(int(self.min_rate))}/s after {self.rate_grace_s:g} s, "
            f"{self.deadline_s:g} s per request"
        )

    def _too_slow(self, elapsed: float) -> ApplianceError:
        return ApplianceError(
            f"{self.url}: {format_size(self.bytes_fetched)} of the header in {elapsed:.1f} s over "
            f"{self.requests} requests, too slow to finish ({self._limits()}): try again later, "
            "or download the file and plan from the local copy"
        )

    def _check_progress(self) -> float:
        """Seconds left for the next request; raises when the read as a whole is too slow."""
        now = time.monotonic()
        if self._started is None:
            self._started = now
        elapsed = now - self._started
        left = self.total_deadline_s - elapsed
        rate_judged = elapsed >= self.rate_grace_s
        if left <= 0 or (rate_judged and self.bytes_fetched < self.min_rate * elapsed):
            raise self._too_slow(elapsed)
        return min(self.deadline_s, left)

    def read(self, offset: int, size: int) -> bytes:
        if self._total is not None and offset >= self._total:
            return b""
        budget = self._check_progress()
        deadline = _Deadline(budget)
        assert self._started is not None
        started = self._started

        def late() -> ApplianceError:
            if budget < self.deadline_s:  # the overall deadline cut this request short
                return self._too_slow(time.monotonic() - started)
            return ApplianceError(
                f"{self.url}: no complete answer within {self.deadline_s:g} s "
                f"({self._limits()}); the server is too slow or stopped answering: try again later"
            )

        try:
            data = self._fetch(offset, size, deadline)
        except ApplianceError:
            if deadline.passed():
                raise late() from None
            raise
        except (OSError, http.client.HTTPException, ValueError, UnicodeError) as exc:
            if deadline.passed():
                raise late() from None
            reason = one_line(" ".join(str(exc).split())[:200]) or type(exc).__name__
            raise ApplianceError(f"{self.url}: cannot fetch: {reason}") from None
        finally:
            deadline.cancel()
        if deadline.passed():
            raise late()
        self.requests += 1
        self.bytes_fetched += len(data)
        if self._progress is not None:
            self._progress(Progress(HEADER_TASK, self.bytes_fetched, None, BYTES))
        return data

    def _fetch(self, offset: int, size: int, deadline: _Deadline) -> bytes:
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            parts = _split_url(url)
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            conn = kind(parts.hostname or "", parts.port, timeout=deadline.left())
            deadline.watch(conn)
            try:
                path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
                conn.request("GET", path, headers={"Range": f"bytes={offset}-{offset + size - 1}"})
                response = conn.getresponse()
                if response.status in REDIRECTS and response.getheader("Location"):
                    url = urllib.parse.urljoin(url, response.getheader("Location", ""))
                    continue
                return self._body(response, offset, size)
            finally:
                conn.close()
        raise ApplianceError(f"{self.url}: more than {MAX_REDIRECTS} redirects")

    def _body(self, response: http.client.HTTPResponse, offset: int, size: int) -> bytes:
        status = response.status
        if status == 416:  # the range starts past the end
            return b""
        if status == 200:
            length = response.getheader("Content-Length")
            whole = f" ({format_size(int(length))})" if length and length.isdigit() else ""
            raise ApplianceError(
                f"{self.url}: the server does not support range requests (answered "
                f"{status} to a Range request), so the header cannot be read alone; "
                f"download the file{whole} and plan from the local copy"
            )
        if status != 206:
            raise ApplianceError(f"{self.url}: HTTP {status} {one_line(str(response.reason))[:200]}")
        content_range = response.getheader("Content-Range", "")
        match = CONTENT_RANGE.fullmatch(content_range.strip())
        if not match:
            raise ApplianceError(
                f"{self.url}: the server answered 206 with Content-Range "
                f"{one_line(repr(content_range[:80]))}, not bytes START-END/TOTAL"
            )
        start, end = int(match.group(1)), int(match.group(2))
        total = None if match.group(3) == "*" else int(match.group(3))
        if start != offset or end < start or end > offset + size - 1 or (total is not None and end >= total):
            raise ApplianceError(
                f"{self.url}: the server sent bytes {start}-{end} when asked "
                f"for {offset}-{offset + size - 1}; refusing a wrong range"
            )
        if total is not None:
            if self._total is not None and total != self._total:
                raise ApplianceError(
                    f"{self.url}: the file size changed from {self._total} to {total} bytes between requests"
                )
            self._total = total
        want = end - start + 1
        data = response.read(want)
        if len(data) != want:
            raise ApplianceError(
                f"{self.url}: the server sent {len(data)} of the {want} bytes "
                f"of range {start}-{end}; the connection was cut"
            )
        return data

    def total_size(self) -> int | None:
        return self._total
