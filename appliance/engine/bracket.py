"""The bracket check: the patch series applies to both stand-ins and touches only identical files.

The stand-ins vendor llama.cpp at releases before and after the canonical pin. When the active
series applies cleanly to both and every upstream file it touches is byte-identical in both,
it applies to the pin in between unchanged. Each experimental patch is checked the same way on
top of the active series and reported separately.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core.errors import ConfigError
from appliance.engine.lock import Lock
from appliance.engine.patches import Patch, active_series, find_experimental, git_apply, on_track
from appliance.engine.source import SourceTree

IDENTICAL = "identical"
NEW = "new in both"


@dataclass(frozen=True)
class FileStatus:
    path: str
    state: str  # IDENTICAL, NEW, "differs", or "only in <stand-in>"

    @property
    def ok(self) -> bool:
        return self.state in (IDENTICAL, NEW)


@dataclass
class PatchCheck:
    patch: Patch
    applies: dict[str, str | None] = field(default_factory=dict)  # stand-in -> None or reason
    files: list[FileStatus] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(reason is None for reason in self.applies.values()) and all(f.ok for f in self.files)

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.patch.file,
            "status": self.patch.status,
            "subject": self.patch.subject,
            "sha256": self.patch.sha256,
            "ok": self.ok,
            "applies": {name: reason is None for name, reason in self.applies.items()},
            "apply_errors": {name: reason for name, reason in self.applies.items() if reason},
            "files": [{"path": f.path, "state": f.state, "ok": f.ok} for f in self.files],
        }


@dataclass
class BracketReport:
    stand_ins: list[str]
    active: list[PatchCheck]
    experimental: list[PatchCheck]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.active) and all(c.ok for c in self.experimental)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "stand_ins": self.stand_ins,
            "active": [c.as_dict() for c in self.active],
            "experimental": [c.as_dict() for c in self.experimental],
        }


def file_state(rel: str, trees: dict[str, SourceTree]) -> str:
    contents = {
        name: (tree.path / rel).read_bytes() if (tree.path / rel).is_file() else None
        for name, tree in trees.items()
    }
    present = [name for name, data in contents.items() if data is not None]
    if not present:
        return NEW
    if len(present) < len(contents):
        return "only in " + ", ".join(present)
    return IDENTICAL if len(set(contents.values())) == 1 else "differs"


def _apply_chain(chain: Sequence[Patch], tree: SourceTree) -> dict[str, str | None]:
    """Apply `chain` in order to a scratch copy of just the files it touches; reason per patch."""
    results: dict[str, str | None] = {}
    scratch = Path(tempfile.mkdtemp(prefix="appliance-bracket-"))
    try:
        for patch in chain:
            for rel in patch.touched_files():
                src, dest = tree.path / rel, scratch / rel
                if src.is_file() and not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dest)
        failed = False
        for patch in chain:
            if failed:
                results[patch.file] = "not tried: an earlier patch failed"
                continue
            results[patch.file] = git_apply(patch, scratch)
            failed = results[patch.file] is not None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def check_chain(chain: Sequence[Patch], trees: dict[str, SourceTree]) -> list[PatchCheck]:
    checks = [PatchCheck(patch) for patch in chain]
    for name, tree in trees.items():
        results = _apply_chain(chain, tree)
        for check in checks:
            check.applies[name] = results[check.patch.file]
    for check in checks:
        check.files = [FileStatus(rel, file_state(rel, trees)) for rel in check.patch.touched_files()]
    return checks


def require_bracket(lock: Lock, names: Sequence[str]) -> None:
    """Refuse a check that brackets nothing: it needs a stand-in on each side of the pin."""
    if len(names) < 2:
        found = ", ".join(names) or "none"
        raise ConfigError(
            f"{lock.path}: /stand_ins: the bracket check needs two stand-ins, one "
            f"before and one after the pin (found: {found}); add them to the lock"
        )


def bracket_check(lock: Lock, trees: dict[str, SourceTree]) -> BracketReport:
    """Check the active series, then each experimental patch on top of it, against `trees`."""
    require_bracket(lock, sorted(trees))
    active = active_series(lock)
    report = BracketReport(sorted(trees), check_chain(active, trees), [])
    for entry in lock.patches["experimental"]:
        patch = find_experimental(lock, entry.file)
        report.experimental.append(check_chain([*active, patch], trees)[-1])
    return report


@dataclass
class TrackReport:
    """The series on a newer track: whether each patch (or its variant there) applies to the
    track's stand-in, and whether the upstream files it touches changed since `compared_with`
    (the bracket's newer stand-in). A changed file is information, not a failure: it is why a
    patch has a variant on the track."""

    track: str
    stand_in: str
    compared_with: str
    active: list[PatchCheck]
    experimental: list[PatchCheck]
    variants: list[str]

    @property
    def ok(self) -> bool:
        return all(r is None for c in self.active + self.experimental for r in c.applies.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "track": self.track,
            "stand_in": self.stand_in,
            "compared_with": self.compared_with,
            "ok": self.ok,
            "variants": self.variants,
            "active": [c.as_dict() for c in self.active],
            "experimental": [c.as_dict() for c in self.experimental],
        }


def track_check(
    lock: Lock, track_name: str, tree: SourceTree, compared_with: str, older: SourceTree
) -> TrackReport:
    """Apply the track's series (variants where it has them) to its stand-in's tree, the active
    series first and each experimental patch on top, and compare the touched files with `older`."""
    track = lock.track(track_name)
    if track is None:
        raise ConfigError("the canonical track is checked by the bracket check")
    trees = {track.stand_in: tree}
    active = on_track(lock, active_series(lock), track_name)
    report = TrackReport(track_name, track.stand_in, compared_with, check_chain(active, trees), [], [])
    for entry in lock.patches["experimental"]:
        chain = on_track(lock, [*active, find_experimental(lock, entry.file)], track_name)
        report.experimental.append(check_chain(chain, trees)[-1])
    compared = {compared_with: older, track.stand_in: tree}
    for check in report.active + report.experimental:
        check.files = [FileStatus(rel, file_state(rel, compared)) for rel in check.patch.touched_files()]
    report.variants = sorted(track.variants)
    return report
