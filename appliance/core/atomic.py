"""Files written whole or not at all.

One scheme for every file that must never be seen half-written (run records, the bundle
manifest and attestation, the lock, traces, models, keys, downloads): the content goes to
`.NAME.RANDOM.tmp` in the same directory, is flushed to disk (fsync), and is renamed over NAME;
the directory is synced so the rename survives a crash. On any error the temporary file is
removed and NAME keeps its old content, or stays absent.
"""

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def _fsync_path(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing_path(path: Path, mode: int | None = None) -> Iterator[Path]:
    """A temporary path beside `path` for a writer that needs a file name; when the block ends
    without an error the file there is synced and renamed to `path`.

    mode: the file's permissions (default: what a plain open() would give under the umask).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~_umask() if mode is None else mode)
        os.close(fd)
        yield tmp
        _fsync_path(tmp, os.O_RDONLY)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # some filesystems cannot sync a directory; the file is whole
        _fsync_path(path.parent, os.O_RDONLY | os.O_DIRECTORY)


@contextmanager
def replacing(path: Path, mode: int | None = None) -> Iterator[IO[bytes]]:
    """A binary handle whose content replaces `path` when the block ends without an error."""
    with replacing_path(path, mode) as tmp, tmp.open("wb") as handle:
        yield handle


def write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    with replacing(path, mode) as handle:
        handle.write(data)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: Path, value: Any, sort_keys: bool = True) -> None:
    """Pretty JSON (keys sorted unless told otherwise) with a final newline."""
    write_text(path, json.dumps(value, indent=2, sort_keys=sort_keys) + "\n")


def move_into(source: Path, destination: Path) -> None:
    """Rename a finished file into place (same filesystem), replacing nothing half-written."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, destination)
