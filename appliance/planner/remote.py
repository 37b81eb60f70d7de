"""A GGUF on a web server, read through HTTP range requests: only the header travels."""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable

from appliance.core.errors import ApplianceError
from appliance.core.units import format_size

CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
TIMEOUT_S = 60

ProgressFn = Callable[[int, int | None], None]


def stderr_progress(fetched: int, total: int | None) -> None:
    of = f" of {format_size(total)}" if total else ""
    print(f"\rheader bytes fetched: {format_size(fetched)}{of} (range requests)", end="",
          file=sys.stderr, flush=True)


class HttpRangeSource:
    """Each read is one `Range: bytes=a-b` request; a server that ignores Range is refused."""

    def __init__(self, url: str,
                 progress: ProgressFn | None = None) -> None:
        self.url = url
        self.name = url
        self.bytes_fetched = 0
        self.requests = 0
        self._total: int | None = None
        self._progress = progress

    def read(self, offset: int, size: int) -> bytes:
        if self._total is not None and offset >= self._total:
            return b""
        request = urllib.request.Request(
            self.url, headers={"Range": f"bytes={offset}-{offset + size - 1}"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                status = response.status
                content_range = response.headers.get("Content-Range", "")
                length = response.headers.get("Content-Length")
                if status != 206:
                    whole = f" ({format_size(int(length))})" if length else ""
                    raise ApplianceError(
                        f"{self.url}: the server does not support range requests (answered "
                        f"{status} to a Range request), so the header cannot be read alone; "
                        f"download the file{whole} and plan from the local copy")
                data = response.read(size)
        except urllib.error.HTTPError as exc:
            if exc.code == 416:  # range starts past the end
                return b""
            raise ApplianceError(f"{self.url}: HTTP {exc.code} {exc.reason}") from exc
        except urllib.error.URLError as exc:
            raise ApplianceError(f"{self.url}: cannot fetch: {exc.reason}") from exc
        match = CONTENT_RANGE.match(content_range)
        if match and match.group(3) != "*":
            self._total = int(match.group(3))
        self.requests += 1
        self.bytes_fetched += len(data)
        if self._progress is not None:
            self._progress(self.bytes_fetched, self._total)
        return data

    def total_size(self) -> int | None:
        return self._total
