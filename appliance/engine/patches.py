"""The llama.cpp patch series: verified patch files, applying them to a source tree, digests.

Patches live in `patches/llama.cpp/<status>/<file>` in `git format-patch` form; the lock records
each one's sha256 and `patches/llama.cpp/series` lists the active order. A patch whose bytes do
not match the lock is refused before anything is applied. The series digest (over the ordered
file names, statuses and sha256) identifies what was applied; `apply_series` writes a patched
copy of a source tree and records that digest beside it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core import atomic
from appliance.core.digests import canonical_json, sha256_bytes, sha256_file, tree_digest
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.paths import default_patches_dir, patches_override
from appliance.core.strict_load import parse_json, read_text
from appliance.engine.lock import Lock, PatchEntry
from appliance.engine.source import SourceTree, ignore_vcs

SERIES_RECORD = ".appliance-series.json"
DIFF_HEADER_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
NUMBER_PREFIX_RE = re.compile(r"^\d{4}-")


@dataclass(frozen=True)
class Patch:
    """One patch file named by the lock, verified against its pinned sha256."""

    file: str
    sha256: str
    status: str
    path: Path

    @property
    def name(self) -> str:
        """The file name without `.patch` and without its `NNNN-` number."""
        return NUMBER_PREFIX_RE.sub("", self.file.removesuffix(".patch"))

    @property
    def subject(self) -> str:
        for line in self.path.read_text(errors="replace").splitlines():
            if line.startswith("Subject: "):
                return re.sub(r"^\[PATCH[^\]]*\]\s*", "", line[len("Subject: ") :])
        return ""

    def touched_files(self) -> list[str]:
        """Upstream paths the patch changes or creates, in the order they appear."""
        return touched_files(self.path.read_text(errors="replace"))


@dataclass(frozen=True)
class PatchedTree:
    """A source tree with patches applied (a private copy the caller may build in)."""

    path: Path
    series_digest: str
    patches: list[tuple[str, str, str]]  # (file, sha256, status) in applied order
    tree_digest: str
    source: dict[str, Any]


def patches_dir(lock: Lock) -> Path:
    """$APPLIANCE_PATCHES; else `patches/llama.cpp/` of the checkout the lock belongs to
    (`<root>/engine/<lock>`); for a lock kept elsewhere (a copy edited for an experiment), the
    project checkout's."""
    override = patches_override()
    if override is not None:
        return override
    beside = lock.path.resolve().parent.parent / "patches" / "llama.cpp"
    return beside if beside.is_dir() else default_patches_dir()


def touched_files(patch_text: str) -> list[str]:
    seen: list[str] = []
    for line in patch_text.splitlines():
        match = DIFF_HEADER_RE.match(line)
        if match and match.group(2) not in seen:
            seen.append(match.group(2))
    return seen


def read_series(lock: Lock) -> list[str]:
    """The active order from `series`: one file name a line, `#` comments and blanks ignored."""
    path = patches_dir(lock) / "series"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise ConfigError(f"{path}: series file not found") from None
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def verified_patch(lock: Lock, entry: PatchEntry) -> Patch:
    """The patch file for a lock entry, refused unless its sha256 matches the lock."""
    path = patches_dir(lock) / entry.status / entry.file
    if not path.is_file():
        raise ConfigError(f"patch {entry.status}/{entry.file} named by the lock does not exist at {path}")
    actual = sha256_file(path)
    if actual != entry.sha256:
        raise IntegrityError(
            f"patch {entry.status}/{entry.file} has sha256 {actual}, the lock pins {entry.sha256}: "
            "refused (restore the file, or re-export it with `appliance patches export`)"
        )
    return Patch(entry.file, entry.sha256, entry.status, path)


def active_series(lock: Lock) -> list[Patch]:
    """The active patches in series order, each verified; series and lock must name the same files."""
    locked = {entry.file: entry for entry in lock.patches["active"]}
    order = read_series(lock)
    if sorted(order) != sorted(locked):
        raise ConfigError(
            f"patches/llama.cpp/series lists {order} but the lock's active patches are "
            f"{sorted(locked)}: make them agree (appliance patches export rewrites both)"
        )
    return [verified_patch(lock, locked[name]) for name in order]


def find_experimental(lock: Lock, name: str) -> Patch:
    """An experimental patch by file name, stem, or stem without its number."""
    for entry in lock.patches["experimental"]:
        stem = entry.file.removesuffix(".patch")
        if name in (entry.file, stem, NUMBER_PREFIX_RE.sub("", stem)):
            return verified_patch(lock, entry)
    known = (
        ", ".join(
            NUMBER_PREFIX_RE.sub("", e.file.removesuffix(".patch")) for e in lock.patches["experimental"]
        )
        or "none"
    )
    raise ApplianceError(f"no experimental patch named {name!r} (experimental patches: {known})")


def selected_patches(lock: Lock, experimental: Sequence[str] = ()) -> list[Patch]:
    """The active series followed by the chosen experimental patches, all verified."""
    chosen = active_series(lock)
    for name in experimental:
        patch = find_experimental(lock, name)
        if patch not in chosen:
            chosen.append(patch)
    return chosen


def on_track(lock: Lock, patches: Sequence[Patch], track_name: str) -> list[Patch]:
    """`patches` as applied on a track: each one the track has a variant of replaced by the file
    of the same name under patches/llama.cpp/tracks/TRACK/, refused unless its sha256 matches the
    lock. The canonical track applies the patches as they are."""
    track = lock.track(track_name)
    if track is None:
        return list(patches)
    chosen = []
    for patch in patches:
        pinned = track.variants.get(patch.file)
        if pinned is None:
            chosen.append(patch)
            continue
        path = patches_dir(lock) / "tracks" / track.name / patch.file
        if not path.is_file():
            raise ConfigError(f"the {track.name} track's variant of {patch.file} does not exist at {path}")
        actual = sha256_file(path)
        if actual != pinned:
            raise IntegrityError(
                f"the {track.name} track's variant of {patch.file} has sha256 {actual}, the lock pins "
                f"{pinned}: refused (restore the file, or pin the new one in the lock)"
            )
        chosen.append(Patch(patch.file, actual, patch.status, path))
    return chosen


def source_track(lock: Lock, source: SourceTree) -> str:
    """The track a fetched source builds: its stand-in's, or the canonical one."""
    name = source.identity.get("name") if source.identity.get("kind") == "stand-in" else None
    return lock.track_of_source(name)


def digest_of(patches: Sequence[Patch]) -> str:
    return sha256_bytes(
        canonical_json([{"file": p.file, "sha256": p.sha256, "status": p.status} for p in patches])
    )


def series_digest(lock: Lock, experimental: Sequence[str] = ()) -> str:
    """sha256 of the canonical JSON list of (file, sha256, status) in applied order."""
    return digest_of(selected_patches(lock, experimental))


def _git_env(work: Path) -> dict[str, str]:
    # never let `git apply` discover an enclosing repository: it would apply relative to its root
    return dict(os.environ, GIT_CEILING_DIRECTORIES=str(work.resolve().parent))


def git_apply(patch: Patch, work: Path, check_only: bool = False) -> str | None:
    """Apply (or check) one patch in `work`; returns None on success, else git's reason."""
    if shutil.which("git") is None:
        raise ApplianceError("applying patches needs git: apt-get install git")
    args = ["git", "apply", "-p1", "--whitespace=nowarn"]
    if check_only:
        args.append("--check")
    result = subprocess.run(
        [*args, str(patch.path)], cwd=work, capture_output=True, text=True, env=_git_env(work)
    )
    if result.returncode == 0:
        return None
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return "; ".join(lines[:3]) or f"git apply exited {result.returncode}"


def copy_tree(src: Path, dest: Path) -> None:
    def skip(directory: str, names: list[str]) -> list[str]:
        return [".git"] if Path(directory) == src and ".git" in names else []

    shutil.copytree(src, dest, symlinks=True, ignore=skip)
    for dirpath, dirnames, filenames in os.walk(dest):  # the source cache is read-only
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                os.chmod(full, os.stat(full).st_mode | 0o200)


def patched_tree_ignore(rel: str) -> bool:
    return ignore_vcs(rel) or rel == SERIES_RECORD


def apply_series(
    lock: Lock, source: SourceTree, out_dir: Path, experimental: Sequence[str] = ()
) -> PatchedTree:
    """Copy `source` to `out_dir` (which must not exist or be empty) and apply the series there.

    The copy is made next to out_dir and renamed when every patch applied, so out_dir never
    holds a half-patched tree. A record of the series sits in `out_dir/.appliance-series.json`.
    """
    track = source_track(lock, source)
    patches = on_track(lock, selected_patches(lock, experimental), track)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ApplianceError(f"{out_dir} exists and is not empty: choose a new directory")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}-"))
    work = scratch / "tree"
    try:
        copy_tree(source.path, work)
        for patch in patches:
            reason = git_apply(patch, work)
            if reason is not None:
                raise ApplianceError(
                    f"patch {patch.status}/{patch.file} does not apply to {source.identity.get('name')}: "
                    f"{reason}"
                )
        digest = digest_of(patches)
        patched_digest = tree_digest(work, patched_tree_ignore)
        record: dict[str, Any] = {
            "series_digest": digest,
            "patches": [{"file": p.file, "sha256": p.sha256, "status": p.status} for p in patches],
            "source": source.identity,
            "track": track,
            "tree_digest": patched_digest,
        }
        (work / SERIES_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        if out_dir.exists():
            out_dir.rmdir()
        work.rename(out_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return PatchedTree(
        path=out_dir,
        series_digest=digest,
        patches=[(p.file, p.sha256, p.status) for p in patches],
        tree_digest=patched_digest,
        source=source.identity,
    )


def patch_records(directory: Path, status: str, files: Sequence[str]) -> list[dict[str, str]]:
    return [{"file": name, "sha256": sha256_file(directory / status / name)} for name in files]


def write_lock_patches(lock_path: Path, patches: dict[str, list[dict[str, str]]]) -> None:
    """Replace only the lock's `"patches"` object, leaving the rest of the file's text alone."""
    write_lock_object(lock_path, "patches", patches)


def write_lock_object(lock_path: Path, key: str, value: dict[str, Any]) -> None:
    """Replace only the lock's top-level object `key`, leaving the rest of the file's text alone."""
    text = read_text(lock_path)
    start = text.find(f'\n  "{key}": {{')
    if start < 0:
        raise ConfigError(f'{lock_path}: no top-level "{key}" object to update')
    end = text.find("\n  }", start + 1)
    block = json.dumps(value, indent=2).replace("\n", "\n  ")
    new_text = f'{text[:start]}\n  "{key}": {block}{text[end + len(chr(10) + "  }") :]}'
    parsed = parse_json(new_text, lock_path)
    if parsed[key] != value:
        raise ConfigError(f"{lock_path}: could not rewrite the {key} object safely")
    atomic.write_text(lock_path, new_text)
