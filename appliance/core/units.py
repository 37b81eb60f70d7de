"""Byte sizes as users write them ("400MiB", "8GiB", "24GB", "1048576") and as we print them.

The one unit table of the appliance. Decimal and binary prefixes mean what the standards say:
K, KB, M, MB, G, GB, T, TB are powers of 1000 (so "8M" is 8,000,000 bytes), KiB, MiB, GiB,
TiB are powers of 1024 (so "8MiB" is 8,388,608 bytes). Case does not matter, "B" alone and a
bare number are bytes. Profiles, the planner, the CLI and the evidence reader all parse sizes
here; everything printed for people uses binary units.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from appliance.core.errors import ApplianceError

UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1 << 30,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1 << 40,
}
SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
PAGE_BYTES = 4096  # the kernel page (x86-64): the unit of mmap faults and page-cache charging
HINT = "write a number with an optional unit, e.g. 400MiB, 8GiB, 24GB"


class SizeError(ApplianceError):
    """A size that cannot be read; the message says how to write one."""


def parse_size(value: str | int) -> int:
    """Bytes in `value`: a byte count (int, not negative) or text such as "8GiB" or "24GB"."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SizeError(f"cannot read size {value!r}: {HINT}")
    if isinstance(value, int):
        if value < 0:
            raise SizeError(f"size {value} is negative: {HINT}")
        return value
    match = SIZE_RE.match(value)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in UNITS:
        raise SizeError(f"cannot read size {value!r}: {HINT}")
    return int(Fraction(match.group(1)) * UNITS[unit])  # exact: a float rounds past 2**53


def size_or_none(value: Any) -> int | None:
    """parse_size for values read from files that may not hold a size: None instead of an error."""
    try:
        return parse_size(value)
    except SizeError:
        return None


def format_size(n: int, trim: bool = False, digits: int = 2, sep: str = " ") -> str:
    """Binary units with two decimals: 8.00 GiB, 400.00 MiB, 512 B (columns line up).

    With trim, trailing zeros go: 8 GiB, 16.6 GiB (for sizes inside sentences). `digits` and
    `sep` make short names: format_size(n, True, 1, "") is 99.5MiB (sweep trial directories).
    """
    value = float(abs(n))
    sign = "-" if n < 0 else ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{value:.0f}{sep}{unit}"
            text = f"{value:.{digits}f}"
            if trim:
                text = text.rstrip("0").rstrip(".")
            return f"{sign}{text}{sep}{unit}"
        value /= 1024
    raise AssertionError("unreachable")
