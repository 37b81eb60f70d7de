"""Content digests: files, directory trees and canonical JSON."""

import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.core.errors import ConfigError

CHUNK = 1 << 20


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    """sha256 of a regular file; a FIFO or a device is refused (ConfigError) before it is opened,
    as core.strict_load.open_regular does; a missing file raises FileNotFoundError as open would."""
    digest = hashlib.sha256()
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ConfigError(f"{path}: is not a regular file (a device, pipe or socket)")
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the form every digest of a JSON document is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def tree_entries(root: Path, ignore: Callable[[str], bool] | None = None) -> list[tuple[str, str, str]]:
    """(relative path, kind, sha256) for every file and symlink below root, sorted by path.

    kind is "x" for executable files, "f" for other files and "l" for symlinks (digest of the
    link target text). Directories are implied by their contents.
    """
    entries: list[tuple[str, str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + sorted(d for d in dirnames if (Path(dirpath) / d).is_symlink()):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if ignore is not None and ignore(rel):
                continue
            if full.is_symlink():
                entries.append((rel, "l", sha256_bytes(os.readlink(full).encode())))
            elif full.is_file():
                kind = "x" if os.access(full, os.X_OK) else "f"
                entries.append((rel, kind, sha256_file(full)))
    entries.sort()
    return entries


def tree_digest(root: Path, ignore: Callable[[str], bool] | None = None) -> str:
    """sha256 over the sorted "kind sha256 path" lines of tree_entries."""
    lines = "".join(f"{kind} {digest} {rel}\n" for rel, kind, digest in tree_entries(root, ignore))
    return sha256_bytes(lines.encode())
