"""Local CPU builds of the patched llama.cpp: the fast loop for patch work (images come later).

A build is identified by its key: the source tree digest, the series digest and the build
configuration, which together determine the patched tree and what is built from it. Results are
cached under `$APPLIANCE_CACHE/engine-builds/<key>/` (`bin/` and `build.json`); a cached build is
reused only when its binaries still match their recorded sha256.

Compiling happens in a workspace per source and configuration (`work-<id>/src`, `work-<id>/build`):
the patched tree is synced into `src` file by file, so files a patch edit did not change keep
their timestamps and ninja recompiles only what changed (seconds instead of minutes after a
tracer edit). ccache is used when installed. Callers sharing a workspace wait on a file lock.
"""

from __future__ import annotations

import fcntl
import filecmp
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from appliance.core.digests import canonical_json, sha256_bytes, sha256_file
from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.paths import cache_dir
from appliance.core.strict_load import load_json
from appliance.engine.lock import Lock
from appliance.engine.patches import apply_series, digest_of, on_track, selected_patches, source_track
from appliance.engine.source import SourceTree, fetch_source
from appliance.engine.tools import LOCAL_TOOLS

BASE_CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_STATIC=ON",  # static llama/ggml (and OpenMP) libraries; libc stays shared
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
RECORD = "build.json"

Log = Callable[[str], None]


def build_jobs() -> int:
    """Parallel compile jobs: $APPLIANCE_BUILD_JOBS, default 2 (shared 2-core machines)."""
    value = os.environ.get("APPLIANCE_BUILD_JOBS", "2")
    if not value.isdigit() or int(value) < 1:
        raise ApplianceError(f"APPLIANCE_BUILD_JOBS={value!r} is not a positive integer")
    return int(value)


def build_identity(source: SourceTree) -> tuple[int, str]:
    """(build number, commit text) that llama.cpp embeds, from the source identity."""
    release = str(source.identity.get("upstream_release") or "")
    number = int(release[1:]) if re.fullmatch(r"b\d+", release) else 0
    kind = source.identity.get("kind")
    if kind == "canonical":
        return number, str(source.identity.get("upstream_commit", "unknown"))[:12]
    if kind == "stand-in":
        return number, f"stand-in-{source.identity.get('name')}"
    return number, "local"


def cmake_args(lock: Lock, source: SourceTree) -> list[str]:
    number, commit = build_identity(source)
    return [
        *BASE_CMAKE_ARGS,
        *lock.target("cpu").cmake_args,
        f"-DLLAMA_BUILD_NUMBER={number}",
        f"-DLLAMA_BUILD_COMMIT={commit}",
    ]


def build_key(lock: Lock, source: SourceTree, experimental: Sequence[str] = ()) -> str:
    return sha256_bytes(
        canonical_json(
            {
                "source_tree_digest": source.identity.get("tree_digest"),
                "series_digest": digest_of(
                    on_track(lock, selected_patches(lock, experimental), source_track(lock, source))
                ),
                "cmake_args": cmake_args(lock, source),
                "targets": list(LOCAL_TOOLS),
            }
        )
    )


def builds_dir() -> Path:
    return cache_dir() / "engine-builds"


def workspace_for(lock: Lock, source: SourceTree) -> Path:
    ident = sha256_bytes(
        canonical_json(
            {"source_tree_digest": source.identity.get("tree_digest"), "cmake_args": cmake_args(lock, source)}
        )
    )
    return builds_dir() / f"work-{ident[:16]}"


def sync_tree(new: Path, dest: Path) -> int:
    """Make dest hold exactly new's files, touching only files whose bytes differ; returns count."""
    changed = 0
    wanted: set[str] = set()
    for dirpath, _, filenames in os.walk(new):
        for name in filenames:
            src = Path(dirpath) / name
            rel = src.relative_to(new)
            wanted.add(rel.as_posix())
            target = dest / rel
            if (
                target.is_file()
                and not target.is_symlink()
                and not src.is_symlink()
                and filecmp.cmp(src, target, shallow=False)
            ):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            if src.is_symlink():
                os.symlink(os.readlink(src), target)
            else:
                shutil.copyfile(src, target)
                shutil.copymode(src, target)
            changed += 1
    for dirpath, _, filenames in os.walk(dest):
        for name in filenames:
            full = Path(dirpath) / name
            if full.relative_to(dest).as_posix() not in wanted:
                full.unlink()
                changed += 1
    return changed


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_build(entry: Path) -> dict[str, Any] | None:
    """The build record when every recorded binary is present with its recorded sha256."""
    try:
        record = load_json(entry / RECORD)
    except ConfigError:
        return None
    binaries = record.get("binaries") if isinstance(record, dict) else None
    if not isinstance(binaries, dict) or set(binaries) != set(LOCAL_TOOLS):
        return None
    for name, digest in binaries.items():
        path = entry / "bin" / name
        if not path.is_file() or sha256_file(path) != digest:
            return None
    return record


def _run_logged(args: list[str], cwd: Path, log_path: Path, what: str) -> None:
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(args)}\n")
        log.flush()
        result = subprocess.run(args, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
        last = tail[-1] if tail else f"exit {result.returncode}"
        raise ApplianceError(f"{what} failed ({last}); full log: {log_path}")


def reset_moved_build(workspace: Path) -> bool:
    """Remove workspace/build when its CMake cache was made at another path (the appliance
    cache was moved or copied): CMake refuses such a cache. True when it was removed."""
    build = workspace / "build"
    try:
        lines = (build / "CMakeCache.txt").read_text(errors="replace").splitlines()
    except OSError:
        return False
    made_in = next((line.split("=", 1)[1] for line in lines if line.startswith("CMAKE_CACHEFILE_DIR:")), None)
    if made_in is not None and Path(made_in) == build.resolve():
        return False
    shutil.rmtree(build)
    return True


def _compile(lock: Lock, source: SourceTree, workspace: Path, log: Log) -> tuple[float, bool]:
    """Configure and build the targets in workspace; returns (seconds, incremental)."""
    log_path = workspace / "build.log"
    log_path.write_text("")
    if reset_moved_build(workspace):
        log(f"{workspace / 'build'} was configured at another path: configuring it afresh")
    incremental = (workspace / "build" / "CMakeCache.txt").is_file()
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    args = cmake_args(lock, source)
    if shutil.which("ccache"):
        args += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    started = time.monotonic()
    log(f"configuring ({' '.join(args)})")
    _run_logged(
        [*nice, "cmake", "-S", "src", "-B", "build", "-G", "Ninja", *args],
        workspace,
        log_path,
        "cmake configure",
    )
    jobs = build_jobs()
    hint = "incremental" if incremental else "about 5 minutes on 2 free cores"
    log(f"building {' '.join(LOCAL_TOOLS)} with -j{jobs} ({hint}); log: {log_path}")
    _run_logged(
        [*nice, "cmake", "--build", "build", "-j", str(jobs), "--target", *LOCAL_TOOLS],
        workspace,
        log_path,
        "build",
    )
    return time.monotonic() - started, incremental


def _build(
    lock: Lock,
    source: SourceTree,
    experimental: Sequence[str],
    key: str,
    entry: Path,
    workspace: Path,
    log: Log,
) -> dict[str, Any]:
    workspace.mkdir(parents=True, exist_ok=True)
    staged = workspace / "src.next"
    shutil.rmtree(staged, ignore_errors=True)
    log(f"applying the patch series to {source.identity.get('name')}")
    patched = apply_series(lock, source, staged, experimental)
    changed = sync_tree(staged, workspace / "src")
    shutil.rmtree(staged)
    log(f"{changed} files changed in {workspace / 'src'}")
    seconds, incremental = _compile(lock, source, workspace, log)
    work = entry.with_name(entry.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    (work / "bin").mkdir(parents=True)
    binaries = {}
    for name in LOCAL_TOOLS:
        shutil.copy2(workspace / "build" / "bin" / name, work / "bin" / name)
        binaries[name] = sha256_file(work / "bin" / name)
    record = {
        "key": key,
        "source": source.identity,
        "series_digest": patched.series_digest,
        "patches": [{"file": f, "sha256": s, "status": st} for f, s, st in patched.patches],
        "patched_tree_digest": patched.tree_digest,
        "cmake_args": cmake_args(lock, source),
        "targets": list(LOCAL_TOOLS),
        "jobs": build_jobs(),
        "build_seconds": round(seconds, 1),
        "incremental": incremental,
        "binaries": binaries,
    }
    (work / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(entry, ignore_errors=True)
    work.rename(entry)
    return record


def build_source(
    lock: Lock, source: SourceTree, experimental: Sequence[str] = (), log: Log | None = None
) -> tuple[Path, dict[str, Any]]:
    """Build (or reuse) the patched tree of `source`; returns (bin dir, build record)."""
    say = log or (lambda message: None)
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        raise ApplianceError("a local build needs cmake and ninja: apt-get install cmake ninja-build g++")
    key = build_key(lock, source, experimental)
    entry = builds_dir() / key[:24]
    workspace = workspace_for(lock, source)
    with _exclusive(workspace.with_name(workspace.name + ".lock")):
        record = cached_build(entry)
        if record is None:
            record = _build(lock, source, experimental, key, entry, workspace, say)
        else:
            say(f"cached build {entry.name} (built in {record.get('build_seconds')} s)")
    return entry / "bin", record


def build_local(
    lock: Lock, source_spec: str, experimental: Sequence[str] = (), log: Log | None = None
) -> Path:
    """Fetch and verify `source_spec`, apply the series and build it; returns the bin dir."""
    bin_dir, _ = build_source(lock, fetch_source(lock, source_spec), experimental, log)
    return bin_dir
