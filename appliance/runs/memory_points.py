"""Memory limits of a sweep: sizes (`200MiB`, `6GiB`) or fractions of the model file (`0.5`).

A plain number is a fraction of the model file's bytes; a size always carries its unit. A
fraction becomes bytes rounded down to whole 4 KiB pages (the kernel charges memory in pages).
Every limit is checked against the profile's engine minimum before anything starts.
"""

from dataclasses import dataclass

from appliance.core import units
from appliance.core.errors import ApplianceError, ConfigError

MAX_FRACTION = 64.0  # a larger plain number is a byte count written without its unit


@dataclass(frozen=True)
class MemoryPoint:
    """One requested limit, as written: `fraction` of the model file, or `size` bytes."""

    text: str
    fraction: float | None = None
    size: int | None = None

    def resolve(self, model_bytes: int) -> int:
        if self.size is not None:
            return self.size
        assert self.fraction is not None
        limit = int(self.fraction * model_bytes) // units.PAGE_BYTES * units.PAGE_BYTES
        if limit <= 0:
            raise ConfigError(
                f"memory {self.text}: {self.fraction} of the {model_bytes}-byte "
                "model rounds to zero bytes; use a larger fraction or a size"
            )
        return limit


def parse_memory_point(value: object) -> MemoryPoint:
    """`0.3` or 0.3 (a fraction of the model file), `200MiB` or `6GiB` (a size)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(
            f"memory {value!r}: expected a fraction of the model (0.5) or a size with its unit (200MiB)"
        )
    text = str(value).strip()
    try:
        fraction = float(text)
    except ValueError:
        fraction = None
    if fraction is not None:
        if not 0 < fraction <= MAX_FRACTION:
            raise ConfigError(
                f"memory {text}: a plain number is a fraction of the model file "
                f"and must be above 0 and at most {MAX_FRACTION:g}; write sizes "
                "with a unit (200MiB)"
            )
        return MemoryPoint(text=text, fraction=fraction)
    try:
        size = units.parse_size(text)
    except ApplianceError:
        raise ConfigError(
            f"memory {text!r}: expected a fraction of the model (0.5) or a size with its unit (200MiB, 6GiB)"
        ) from None
    if size <= 0:
        raise ConfigError(f"memory {text}: a memory limit must be above zero")
    return MemoryPoint(text=text, size=size)


def parse_memory_list(text: str) -> tuple[MemoryPoint, ...]:
    """The `--memory` option: comma-separated points."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ConfigError(
            f"--memory {text!r}: give a comma-separated list such as 0.3,0.5,1.2 or 150MiB,200MiB,600MiB"
        )
    return tuple(parse_memory_point(item) for item in items)


@dataclass(frozen=True, order=True)
class SweepLimit:
    """One resolved limit of a sweep: its bytes and the point, as written, that asked for it.
    Resolved once (`resolve_limits`); trials, the grid and run.json carry the pair."""

    bytes: int
    point: str


def resolve_limits(
    points: tuple[MemoryPoint, ...], model_bytes: int, floor: int, profile_name: str
) -> list[SweepLimit]:
    """The limit of each point, ascending; refuses a limit below floor and duplicates."""
    limits: dict[int, str] = {}
    for point in points:
        limit = point.resolve(model_bytes)
        if limit < floor:
            raise ConfigError(
                f"memory {point.text} ({limit} bytes) is below profile "
                f"{profile_name}'s engine minimum of {floor} bytes"
            )
        if limit in limits:
            raise ConfigError(
                f"memory {point.text} and {limits[limit]} are the same limit "
                f"({limit} bytes): list each limit once"
            )
        limits[limit] = point.text
    return sorted(SweepLimit(limit, text) for limit, text in limits.items())


def limit_label(limit: int) -> str:
    """A short name for a limit in trial directory names: 200MiB, 119.4MiB, 6GiB (the unit
    table of core.units, one decimal, no space)."""
    return units.format_size(limit, trim=True, digits=1, sep="")
