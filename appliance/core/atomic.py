"""Files written whole or not at all.

One scheme for every file that must never be seen half-written (run records, the bundle
manifest and attestation, the lock, traces, models, keys, downloads): the content goes to
`.NAME.PID.RANDOM.tmp` in the same directory, is flushed to disk (fsync), and is renamed over
NAME; the directory is synced so the rename survives a crash. On any error (SIGTERM included: the
CLI turns it into an interrupt) the temporary file is removed and NAME keeps its old content, or
stays absent. A temporary file whose writer was killed outright (SIGKILL, power loss) carries
that writer's PID, so the next write of NAME finds it dead and removes the file. NAME itself must
be a regular file or absent: a device node, fifo, directory or symlink is never replaced.
"""

import contextlib
import glob
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from appliance.core.errors import ApplianceError

TMP_SUFFIX = ".tmp"


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
    refuse_special(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=TMP_SUFFIX, dir=path.parent)
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


def stale_temporaries(path: Path) -> list[Path]:
    """Temporary files of `path` (`.NAME.PID.RANDOM.tmp`) whose writing process is gone."""
    stale = []
    for candidate in path.parent.glob(f".{glob.escape(path.name)}.*{TMP_SUFFIX}"):
        pid = candidate.name[len(path.name) + 2 :].split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            stale.append(candidate)
        except OSError:
            pass  # alive, owned by someone else
    return sorted(stale)


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove what `stale_temporaries` finds; the paths removed."""
    removed = []
    for stale in stale_temporaries(path):
        try:
            stale.unlink()
        except OSError:
            continue
        removed.append(stale)
    return removed


def refuse_special(path: Path) -> None:
    """Refuse to write over anything but a regular file (the rename would replace a device node,
    a fifo or a symlink with a plain file)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ApplianceError(f"cannot write {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ApplianceError(
            f"{path} exists and is not a regular file (a device, directory, "
            "link or fifo); give a new file path"
        )


def move_into(source: Path, destination: Path) -> None:
    """Rename a finished file into place (same filesystem), replacing nothing half-written."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, destination)


def output_problem(path: Path, directory: bool) -> str | None:
    """Why `path` cannot be written as an output, or None."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            return "is a symbolic link; give the real path"
        if directory and not stat.S_ISDIR(info.st_mode):
            return "exists and is not a directory"
        if not directory and not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a special file"
            return f"is {kind}, not a regular file; choose a file path"
    parent = path if info is not None and directory else path.parent
    existing = parent.absolute()
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot be created: {existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot be written: {existing} is not writable"
    try:  # root passes access(2) on a read-only directory, and /proc looks writable to it
        fd, probe = tempfile.mkstemp(prefix=".appliance-write-check-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot be written: creating a file in {existing} fails ({exc.strerror})"
    return None
