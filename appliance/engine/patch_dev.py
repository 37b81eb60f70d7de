"""Editing patches: a git checkout with one commit per patch, and exporting the commits back.

`make_dev_tree` commits the unpatched source (tagged `base`) and applies each patch with
`git am`, so every patch is one commit with its subject and description. After editing,
`export_patches` runs `git format-patch` over `base..HEAD`, writes the files back into
`patches/llama.cpp/`, rewrites `series` and re-pins the lock. A patch that was not edited
comes back byte-identical (author, date and description travel through `git am`).
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

from appliance.core import atomic
from appliance.core.errors import ApplianceError
from appliance.core.strict_load import load_json, parse_json, read_text
from appliance.engine.lock import Lock
from appliance.engine.patches import (
    NUMBER_PREFIX_RE,
    Patch,
    copy_tree,
    patch_records,
    patches_dir,
    selected_patches,
    write_lock_object,
    write_lock_patches,
)
from appliance.engine.source import SourceTree

DEV_RECORD = "appliance-dev.json"  # inside .git/: subject -> (file, status) of each patch
BASE_TAG = "base"
IDENTITY = {
    "GIT_AUTHOR_NAME": "appliance",
    "GIT_AUTHOR_EMAIL": "appliance@localhost",
    "GIT_COMMITTER_NAME": "appliance",
    "GIT_COMMITTER_EMAIL": "appliance@localhost",
}


@dataclass(frozen=True)
class Exported:
    file: str
    status: str
    changed: bool


def _git(args: list[str], cwd: Path) -> str:
    env = dict(os.environ, **IDENTITY, GIT_CEILING_DIRECTORIES=str(cwd.resolve().parent))
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise ApplianceError(f"git {args[0]} in {cwd} failed: {lines[-1] if lines else result.returncode}")
    return result.stdout


def _subject(patch_text: str) -> str:
    for line in patch_text.splitlines():
        if line.startswith("Subject: "):
            return re.sub(r"^\[PATCH[^\]]*\]\s*", "", line[len("Subject: ") :])
    return ""


def make_dev_tree(
    lock: Lock, source: SourceTree, out_dir: Path, experimental: Sequence[str] = ()
) -> list[Patch]:
    """A git checkout of `source` at out_dir: commit `base`, then one commit per patch."""
    if out_dir.exists():
        raise ApplianceError(f"{out_dir} exists: choose a new directory")
    patches = selected_patches(lock, experimental)
    copy_tree(source.path, out_dir)
    _git(["init", "-q"], out_dir)
    _git(["add", "-A"], out_dir)
    _git(["commit", "-q", "-m", f"upstream {source.identity.get('name')}"], out_dir)
    _git(["tag", BASE_TAG], out_dir)
    record = {}
    for patch in patches:
        _git(["am", "-q", "--keep-cr", str(patch.path)], out_dir)
        record[patch.subject] = {"file": patch.file, "status": patch.status}
    (out_dir / ".git" / DEV_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return patches


def _slug(subject: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return words[:40].rstrip("-") or "patch"


def export_patches(lock: Lock, dev_dir: Path, new_status: str = "active") -> list[Exported]:
    """Write `base..HEAD` of dev_dir back as patch files, rewrite `series` and the lock.

    Commits that came from a patch keep its file name and status; new commits are numbered
    after the highest existing number and get `new_status` (active or experimental).
    """
    if new_status not in ("active", "experimental"):
        raise ApplianceError(f"new patches can be active or experimental, not {new_status!r}")
    record_path = dev_dir / ".git" / DEV_RECORD
    if not record_path.is_file():
        raise ApplianceError(f"{dev_dir} is not a tree made by `appliance patches dev`")
    known: dict[str, dict[str, str]] = load_json(record_path)
    directory = patches_dir(lock)
    out: list[Exported] = []
    with tempfile.TemporaryDirectory(prefix="appliance-export-") as tmp:
        _git(
            ["format-patch", "-q", "-N", "--zero-commit", "--no-signature", "-o", tmp, f"{BASE_TAG}..HEAD"],
            dev_dir,
        )
        produced = sorted(Path(tmp).iterdir())
        locked_status = {e.file: e.status for entries in lock.patches.values() for e in entries}
        all_files = [info["file"] for info in known.values()]
        all_files += [e.file for entries in lock.patches.values() for e in entries]
        used_numbers = [int(m.group(0)[:4]) for name in all_files if (m := NUMBER_PREFIX_RE.match(name))]
        next_number = max(used_numbers, default=0) + 1
        for path in produced:
            text = path.read_text()
            info = known.get(_subject(text))
            if info is not None and info["file"] in locked_status:  # the lock knows best
                info = {"file": info["file"], "status": locked_status[info["file"]]}
            if info is None:
                info = {"file": f"{next_number:04d}-{_slug(_subject(text))}.patch", "status": new_status}
                next_number += 1
            known[_subject(text)] = info
            dest = directory / info["status"] / info["file"]
            changed = not dest.is_file() or dest.read_bytes() != path.read_bytes()
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            out.append(Exported(info["file"], info["status"], changed))
    atomic.write_json(record_path, known, sort_keys=False)
    active = [e.file for e in out if e.status == "active"]
    experimental = [e.file for e in out if e.status == "experimental"]
    exported = {e.file for e in out}
    experimental += [e.file for e in lock.patches["experimental"] if e.file not in exported]
    experimental.sort()  # by number: exporting a subset keeps the lock's order
    series_path = directory / "series"
    header = [line for line in series_path.read_text().splitlines() if line.startswith("#")]
    atomic.write_text(series_path, "\n".join([*header, *active]) + "\n")
    write_lock_patches(
        lock.path,
        {
            "active": patch_records(directory, "active", active),
            "experimental": patch_records(directory, "experimental", experimental),
            "rejected": [{"file": e.file, "sha256": e.sha256} for e in lock.patches["rejected"]],
        },
    )
    return out


def repin(lock: Lock) -> dict[str, list[dict[str, str]]]:
    """Re-pin the lock's sha256 for the patch files as they are now (after editing by hand): the
    series by status, then each track's variants (as `tracks/TRACK`)."""
    directory = patches_dir(lock)
    pinned = {
        status: patch_records(directory, status, [e.file for e in lock.patches[status]])
        for status in ("active", "experimental", "rejected")
    }
    write_lock_patches(lock.path, pinned)
    tracks = parse_json(read_text(lock.path), lock.path).get("tracks")
    if tracks:
        for name, track in tracks.items():
            files = [v["file"] for v in track["variants"]]
            track["variants"] = patch_records(directory, f"tracks/{name}", files)
            pinned[f"tracks/{name}"] = track["variants"]
        write_lock_object(lock.path, "tracks", tracks)
    return pinned


def move_patch(lock: Lock, name: str, status: str) -> tuple[str, str]:
    """Move a patch to active (end of the series), experimental or rejected; returns (file, old)."""
    if status not in ("active", "experimental", "rejected"):
        raise ApplianceError(f"unknown status {status!r}: use active, experimental or rejected")
    entries = [e for entries in lock.patches.values() for e in entries]
    stem = NUMBER_PREFIX_RE.sub("", name.removesuffix(".patch"))
    found = [
        e
        for e in entries
        if name == e.file or stem == NUMBER_PREFIX_RE.sub("", e.file.removesuffix(".patch"))
    ]
    if len(found) != 1:
        raise ApplianceError(f"no single patch named {name!r} in the lock")
    entry = found[0]
    if entry.status == status:
        return entry.file, entry.status
    directory = patches_dir(lock)
    (directory / status).mkdir(exist_ok=True)
    os.replace(directory / entry.status / entry.file, directory / status / entry.file)
    files = {s: [e.file for e in lock.patches[s] if e.file != entry.file] for s in lock.patches}
    files[status].append(entry.file)
    series_path = directory / "series"
    lines = [line for line in series_path.read_text().splitlines() if line.strip() != entry.file]
    if status == "active":
        lines.append(entry.file)
    atomic.write_text(series_path, "\n".join(lines) + "\n")
    write_lock_patches(lock.path, {s: patch_records(directory, s, f) for s, f in files.items()})
    return entry.file, entry.status
