"""Verified llama.cpp sources: the canonical git pin, a PyPI stand-in, or a local directory.

Every source ends up as a tree plus an identity record (kind, what was fetched, its digests).
Stand-in archives are checked against the lock's sha256 before anything is extracted, and
cached under the stand-in's whole declared identity (package, version, sha256, subtree);
cached trees are re-hashed on every use, so an edited or truncated
cache entry is detected and repaired from the verified archive (or refetched).
"""

import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.core import atomic
from appliance.core.digests import CHUNK, canonical_json, sha256_bytes, sha256_file, tree_digest
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.paths import cache_dir
from appliance.core.strict_load import load_json
from appliance.engine.lock import Lock, StandIn
from appliance.engine.package_index import find_sdist

GIT_TIMEOUT_S = 30
IDENTITY_FILE = "identity.json"

Progress = Callable[[str, int, int | None], None]


@dataclass
class SourceTree:
    """A llama.cpp source tree (treat as read-only) and the record of where it came from."""

    path: Path
    identity: dict[str, Any]
    downloaded_bytes: int = 0
    repaired: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def is_canonical(self) -> bool:
        return bool(self.identity.get("kind") == "canonical")


def ignore_vcs(rel: str) -> bool:
    return rel == ".git" or rel.startswith(".git/")


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def sources_dir() -> Path:
    return cache_dir() / "sources"


def downloads_dir() -> Path:
    return cache_dir() / "downloads"


def fetch_source(lock: Lock, spec: str, progress: Progress | None = None) -> SourceTree:
    """Fetch and verify `spec`: "canonical", a stand-in name from the lock, or a directory."""
    if spec == "canonical":
        return fetch_canonical(lock)
    if spec in lock.stand_ins:
        return fetch_stand_in(lock.stand_ins[spec], progress)
    candidate = Path(spec).expanduser()
    if candidate.is_dir():
        return local_source(candidate)
    names = ", ".join(["canonical", *sorted(lock.stand_ins)])
    raise ApplianceError(f"unknown source {spec!r}: use one of {names}, or an existing directory")


# --- stand-ins -------------------------------------------------------------------------------


def _archive_path(stand_in: StandIn) -> Path:
    return downloads_dir() / f"{stand_in.package}-{stand_in.version}-{stand_in.sdist_sha256[:16]}.tar.gz"


def _download(url: str, dest: Path, expected_sha256: str, progress: Progress | None) -> int:
    """Download to a temporary file, check sha256, then move into place. Returns bytes read."""
    received = 0
    try:
        with atomic.replacing_path(dest) as tmp:
            with tmp.open("wb") as out, urllib.request.urlopen(url, timeout=60) as response:
                total = int(response.headers.get("Content-Length") or 0) or None
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    received += len(chunk)
                    if progress:
                        progress("download", received, total)
            actual = sha256_file(tmp)
            if actual != expected_sha256:
                raise IntegrityError(
                    f"downloaded {dest.name} has sha256 {actual}, the lock pins "
                    f"{expected_sha256}: refused, nothing extracted (check the index or the lock)"
                )
    except (urllib.error.URLError, TimeoutError) as exc:
        raise ApplianceError(f"download of {url} failed: {exc}") from None
    return received


def _refuse_unsafe(archive: Path, member: tarfile.TarInfo, rel: str) -> None:
    """Only regular files, directories and links that stay inside the tree are extracted."""

    def escapes(path: str) -> bool:
        return os.path.isabs(path) or os.path.normpath(path).split(os.sep)[0] == ".."

    unsafe = not (member.isfile() or member.isdir() or member.issym()) or escapes(rel)
    if member.issym():
        unsafe = unsafe or escapes(os.path.join(os.path.dirname(rel), member.linkname))
    if unsafe:
        raise IntegrityError(f"{archive.name}: unsafe archive member {member.name!r}; refused")


def _extract_subtree(archive: Path, subtree: str, dest: Path) -> None:
    """Extract only `<top>/<subtree>/` of the sdist into dest (created atomically)."""
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".extract-"))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            if not members:
                raise IntegrityError(f"{archive.name}: empty archive")
            top = members[0].name.split("/", 1)[0]
            prefix = f"{top}/{subtree.strip('/')}/"
            chosen = []
            for member in members:
                if not member.name.startswith(prefix):
                    continue
                rel = member.name[len(prefix) :]
                if not rel or ignore_vcs(rel):
                    continue
                _refuse_unsafe(archive, member, rel)
                member.name = rel
                chosen.append(member)
            if not chosen:
                raise IntegrityError(f"{archive.name}: no {subtree}/ inside the archive")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, members=chosen, filter="data")
            else:  # Python before 3.11.4: _refuse_unsafe has vetted every member
                tar.extractall(tmp, members=chosen)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise IntegrityError(f"{archive.name}: cannot extract ({exc}); delete it and fetch again") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _read_identity(entry: Path) -> dict[str, Any] | None:
    try:
        value = load_json(entry / IDENTITY_FILE)
        return value if isinstance(value, dict) else None
    except ConfigError:
        return None


def _write_identity(entry: Path, identity: dict[str, Any]) -> None:
    atomic.write_json(entry / IDENTITY_FILE, identity)


def declared_identity(stand_in: StandIn) -> dict[str, str]:
    """What the lock declares about a stand-in's tree: all of it keys the cache entry."""
    return {
        "package": stand_in.package,
        "version": stand_in.version,
        "sdist_sha256": stand_in.sdist_sha256,
        "subtree": stand_in.tree,
    }


def stand_in_entry(stand_in: StandIn) -> Path:
    """The cache entry of a stand-in: named by a digest of its whole declared identity, so an
    edit of package, version, sha256 or tree in the lock never finds an older tree."""
    key = sha256_bytes(canonical_json(declared_identity(stand_in)))
    return sources_dir() / f"stand-in-{stand_in.name}-{key[:16]}"


def fetch_stand_in(stand_in: StandIn, progress: Progress | None = None) -> SourceTree:
    entry = stand_in_entry(stand_in)
    tree = entry / "tree"
    identity = _read_identity(entry)
    declared = declared_identity(stand_in)
    if identity and any(identity.get(k) != v for k, v in declared.items()):
        identity = None
    if identity and tree.is_dir():
        if tree_digest(tree) == identity.get("tree_digest"):
            return SourceTree(tree, identity)
        repaired_note = f"cache entry {entry.name} does not match its identity record: re-extracting"
    else:
        repaired_note = ""

    archive = _archive_path(stand_in)
    downloaded = 0
    if archive.exists() and sha256_file(archive) != stand_in.sdist_sha256:
        archive.unlink()
        repaired_note = repaired_note or f"cached archive {archive.name} is corrupt: downloading again"
    if not archive.exists():
        url, index_sha = find_sdist(stand_in.package, stand_in.version)
        if index_sha and index_sha != stand_in.sdist_sha256:
            raise IntegrityError(
                f"the index lists {stand_in.package}=={stand_in.version} with sha256 {index_sha}, "
                f"the lock pins {stand_in.sdist_sha256}: refused, nothing downloaded"
            )
        downloaded = _download(url, archive, stand_in.sdist_sha256, progress)

    entry.mkdir(parents=True, exist_ok=True)
    (entry / IDENTITY_FILE).unlink(missing_ok=True)
    _extract_subtree(archive, stand_in.tree, tree)
    identity = {
        "kind": "stand-in",
        "name": stand_in.name,
        "package": stand_in.package,
        "version": stand_in.version,
        "sdist_sha256": stand_in.sdist_sha256,
        "upstream_release": stand_in.release,
        "relation": stand_in.relation,
        "subtree": stand_in.tree,
        "tree_digest": tree_digest(tree),
        "verified": True,
        "canonical": False,
        "fetched_at": _now(),
    }
    _write_identity(entry, identity)
    result = SourceTree(tree, identity, downloaded_bytes=downloaded, repaired=bool(repaired_note))
    if repaired_note:
        result.notes.append(repaired_note)
    return result


# --- canonical git pin -----------------------------------------------------------------------


def _git(args: list[str], cwd: Path | None = None, timeout: float = GIT_TIMEOUT_S) -> str:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true")
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, args, result.stdout, result.stderr)
    return result.stdout.strip()


def _last_line(exc: subprocess.CalledProcessError) -> str:
    lines = [line for line in (exc.stderr or "").splitlines() if line.strip()]
    return lines[-1] if lines else f"git exited {exc.returncode}"


def fetch_canonical(lock: Lock) -> SourceTree:
    up = lock.upstream
    entry = sources_dir() / f"canonical-{up.commit}"
    tree = entry / "tree"
    identity = _read_identity(entry)
    if identity and tree.is_dir():
        head = _git(["rev-parse", "HEAD"], cwd=tree)
        if head == up.commit and tree_digest(tree, ignore_vcs) == identity.get("tree_digest"):
            return SourceTree(tree, identity)
    stand_ins = " or ".join(f"--source {name}" for name in sorted(lock.stand_ins))
    try:
        _git(["ls-remote", up.repository, "HEAD"])
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        reason = _last_line(exc) if isinstance(exc, subprocess.CalledProcessError) else "timed out"
        raise ApplianceError(
            f"canonical source {up.repository} unreachable ({reason}); use a stand-in: {stand_ins}"
        ) from None

    entry.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=entry, prefix=".clone-"))
    try:
        _git(["init", "-q", str(work)])
        _git(["remote", "add", "origin", up.repository], cwd=work)
        try:
            _git(["fetch", "-q", "--depth", "1", "origin", up.commit], cwd=work, timeout=1800)
        except subprocess.CalledProcessError:
            try:
                _git(["fetch", "-q", "origin"], cwd=work, timeout=3600)
            except subprocess.CalledProcessError as exc:
                raise ApplianceError(f"git fetch from {up.repository} failed: {_last_line(exc)}") from None
        try:
            _git(["-c", "advice.detachedHead=false", "checkout", "-q", up.commit], cwd=work)
        except subprocess.CalledProcessError:
            raise IntegrityError(
                f"pinned commit {up.commit} is not in {up.repository}: refused "
                f"(fix upstream.commit in the lock, or use {stand_ins})"
            ) from None
        head = _git(["rev-parse", "HEAD"], cwd=work)
        if head != up.commit:
            raise IntegrityError(f"checked-out HEAD {head} is not the pinned commit {up.commit}: refused")
        if tree.exists():
            shutil.rmtree(tree)
        work.rename(tree)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    identity = {
        "kind": "canonical",
        "name": "canonical",
        "repository": up.repository,
        "upstream_commit": up.commit,
        "upstream_release": up.release,
        "tree_digest": tree_digest(tree, ignore_vcs),
        "verified": True,
        "canonical": True,
        "fetched_at": _now(),
    }
    _write_identity(entry, identity)
    return SourceTree(tree, identity)


# --- local directory -------------------------------------------------------------------------


def local_source(path: Path) -> SourceTree:
    root = path.resolve()
    if not (root / "CMakeLists.txt").is_file() or not (root / "src").is_dir():
        raise ApplianceError(f"{path} does not look like a llama.cpp tree (no CMakeLists.txt and src/)")
    identity = {
        "kind": "local",
        "name": root.name,
        "tree_digest": tree_digest(root, ignore_vcs),
        "verified": False,
        "canonical": False,
        "note": "local directory: identity is its tree digest only; not verified against the lock",
    }
    return SourceTree(root, identity)
