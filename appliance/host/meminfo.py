"""This host's memory as /proc/meminfo tells it: the one place its lines are read."""

import re
from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def meminfo_bytes(key: str) -> int | None:
    """Bytes of the /proc/meminfo line `key` (MemTotal, MemAvailable, SwapTotal, ...), or None
    when the file cannot be read or has no such line."""
    try:
        meminfo = MEMINFO.read_text()
    except OSError:
        return None
    match = re.search(rf"^{re.escape(key)}:\s+(\d+) kB$", meminfo, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None
