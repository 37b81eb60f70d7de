"""Byte sizes as users write them ("400MiB", "8GiB", "24GB", "1048576") and as we print them."""

from __future__ import annotations

import re

from appliance.core.errors import ApplianceError

UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1 << 10,
    "m": 1000**2, "mb": 1000**2, "mib": 1 << 20,
    "g": 1000**3, "gb": 1000**3, "gib": 1 << 30,
    "t": 1000**4, "tb": 1000**4, "tib": 1 << 40,
}
SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes in `text`; KB/MB/GB are powers of 1000, KiB/MiB/GiB powers of 1024."""
    match = SIZE_RE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in UNITS:
        raise ApplianceError(
            f"cannot read size {text!r}: write a number with an optional unit, e.g. 400MiB, "
            "8GiB, 24GB")
    return int(float(match.group(1)) * UNITS[unit])


def format_size(n: int) -> str:
    """Binary units with two decimals: 8.00 GiB, 400.00 MiB, 512 B."""
    value = float(abs(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            sign = "-" if n < 0 else ""
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
