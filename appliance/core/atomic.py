"""Files written whole or not at all: a temporary name in the same directory, then a rename."""

import glob
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would differ from a plain open()
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: Path, value: Any) -> None:
    """Pretty, key-sorted JSON with a final newline."""
    write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def stale_temporaries(path: Path, suffix: str) -> list[Path]:
    """Temporary files `.NAME.PID<suffix>` next to `path` left by processes that are gone
    (killed before they could clean up)."""
    stale = []
    for candidate in path.parent.glob(f".{glob.escape(path.name)}.*{glob.escape(suffix)}"):
        pid = candidate.name[len(path.name) + 2:-len(suffix)]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            stale.append(candidate)
        except OSError:
            pass  # alive, owned by someone else
    return sorted(stale)


def remove_stale_temporaries(path: Path, suffix: str) -> list[Path]:
    """Remove what `stale_temporaries` finds; the paths removed."""
    removed = []
    for stale in stale_temporaries(path, suffix):
        try:
            stale.unlink()
        except OSError:
            continue
        removed.append(stale)
    return removed


def move_into(source: Path, destination: Path) -> None:
    """Rename a finished file into place (same filesystem), replacing nothing half-written."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, destination)
