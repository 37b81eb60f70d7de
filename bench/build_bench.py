"""`make bench-build`: the cpu engine image's build times with the compiler cache.

Three builds from the b10229 stand-in, each timed: (1) the image of this lock (compiles
everything unless it exists, filling the ccache mount on the way); (2) the same again, which
must be a cache hit; (3) the image of a copy of the lock whose 0002-demand-mmap patch differs
in one line (a string in src/llama-mmap.cpp): a new image whose build reuses every object
but the ones that line reaches. Printed: seconds for each, and the ccache statistics the
third build logged. The image of (3) is removed afterwards. Figures depend on the machine's
load: the line with the load average says what it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from appliance.core.paths import repo_root
from appliance.engine.lock import load_lock
from appliance.host.docker import docker_client
from appliance.images.build import BuildResult, build_image

SOURCE = "b10229"
PATCH = "0002-demand-mmap.patch"
OLD_LINE = '+            LLAMA_LOG_WARN("warning: posix_fadvise(.., %s) failed: %s\\n",'
NEW_LINE = '+            LLAMA_LOG_WARN("warning: posix_fadvise(.., %s) failed (bench): %s\\n",'


def one_line_changed_lock(root: Path) -> Path:
    """A copy of the lock and patches under root with one line of PATCH changed, re-pinned."""
    shutil.copytree(repo_root() / "patches", root / "patches")
    (root / "engine").mkdir()
    lock_path = root / "engine" / "llama.cpp.lock.json"
    raw = json.loads((repo_root() / "engine" / "llama.cpp.lock.json").read_text())
    patch = root / "patches" / "llama.cpp" / "active" / PATCH
    text = patch.read_text()
    if text.count(OLD_LINE) != 1:
        raise SystemExit(f"{PATCH} no longer has the line this benchmark changes: update it")
    patch.write_text(text.replace(OLD_LINE, NEW_LINE))
    for entry in raw["patches"]["active"]:
        if entry["file"] == PATCH:
            entry["sha256"] = hashlib.sha256(patch.read_bytes()).hexdigest()
    lock_path.write_text(json.dumps(raw, indent=2) + "\n")
    return lock_path


def timed_build(lock_path: Path | None) -> tuple[float, BuildResult]:
    start = time.monotonic()
    result = build_image(load_lock(lock_path), "cpu", SOURCE)
    return time.monotonic() - start, result


def ccache_lines(log: Path | None) -> list[str]:
    if log is None:
        return []
    return [
        line.split("ccache: ", 1)[1]
        for line in log.read_text().splitlines()
        if "ccache: " in line and ("Hits" in line or "Misses" in line or "hit" in line)
    ]


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    seconds, first = timed_build(None)
    state = "reused" if first.reused else "built"
    print(f"1 this lock's image ({state}):           {seconds:8.1f} s  {first.tag}")
    seconds, again = timed_build(None)
    print(f"2 same inputs again (reused={again.reused}):   {seconds:8.1f} s")
    with tempfile.TemporaryDirectory() as tmp:
        lock_path = one_line_changed_lock(Path(tmp))
        seconds, changed = timed_build(lock_path)
    print(f"3 one line of {PATCH} changed: {seconds:8.1f} s  (log {changed.log_path})")
    for line in ccache_lines(changed.log_path):
        print(f"  ccache: {line.strip()}")
    docker_client().images.remove(changed.tag, force=True)


if __name__ == "__main__":
    main()
