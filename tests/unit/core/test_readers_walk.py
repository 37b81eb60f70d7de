"""One rule for every file the product reads: through appliance.core.strict_load (regular
files only, never blocking on a FIFO, size budgets, depth limits, duplicate keys and huge
numbers refused). This test walks every `open(`, `.open(`, `.read_text(`, `.read_bytes(`,
`json.load(s)` and `yaml.*load` call in appliance/ and fails on one not in ALLOWED below.

ALLOWED maps (module, call) to why that module may read its way: a file the appliance itself
wrote a moment ago, the kernel's own files, the project's own checkout, write handles.
A new entry needs a reason a reviewer can check."""

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "appliance"
READERS = "appliance/core/strict_load.py"  # the readers themselves

WRITES = "opens a file for writing (or a file descriptor it made itself), not a read"
KERNEL = "a kernel file under /proc or /sys: no user controls it and it is never a FIFO"
CHECKOUT = "the project's own files (patch series, Dockerfile, schemas, pyproject) in its checkout"
ALLOWED: dict[tuple[str, str], str] = {
    ("appliance/attest/provenance.py", "read_text"): KERNEL + " (/proc/cpuinfo)",
    ("appliance/runs/device_server.py", "read_text"): KERNEL + " (/proc/PID/net/tcp{,6})",
    ("appliance/host/read_ahead.py", "read_text"): KERNEL + " (/sys/dev/block/MAJ:MIN/queue/read_ahead_kb)",
    ("appliance/cli/report.py", "open"): "webbrowser.open hands the page's file:// URI to the "
    "user's browser; nothing is read",
    ("appliance/cluster/executor.py", "open"): "tarfile.open of bytes in memory (a node's trial archive)",
    ("appliance/cluster/node.py", "open"): "tarfile.open writing to a buffer in memory",
    ("appliance/core/atomic.py", "open"): WRITES,
    ("appliance/core/digests.py", "open"): "sha256_file: refuses what is not a regular file from its stat, "
    "then opens non-blocking (the same rule as strict_load.open_regular)",
    ("appliance/core/validation.py", "read_text"): CHECKOUT + " (package data)",
    ("appliance/core/validation.py", "json.loads"): CHECKOUT + " (the schemas, package data)",
    ("appliance/engine/bracket.py", "read_bytes"): "files of an unpacked llama.cpp source tree the "
    "appliance verified by digest and unpacked itself",
    ("appliance/engine/local_build.py", "open"): WRITES + " (build logs)",
    ("appliance/engine/local_build.py", "read_text"): "the build log the appliance is writing",
    ("appliance/engine/patch_dev.py", "read_text"): "patches git format-patch just wrote, and the series",
    ("appliance/engine/patch_dev.py", "read_bytes"): "patches git format-patch just wrote, compared",
    ("appliance/engine/patches.py", "read_text"): CHECKOUT + " (patch files pinned by sha256, series)",
    ("appliance/engine/source.py", "open"): WRITES + " (a download) and tarfile.open of an sdist "
    "verified by its pinned sha256 first",
    ("appliance/host/cgroups.py", "read_text"): KERNEL,
    ("appliance/host/meminfo.py", "read_text"): KERNEL + " (/proc/meminfo)",
    ("appliance/host/pagecache.py", "open"): "os.open of a model file only to fadvise/mincore it, "
    "never read (non-blocking: a FIFO opens at once and fadvise refuses it)",
    ("appliance/images/base.py", "open"): WRITES + " (a tar stream into docker import)",
    ("appliance/images/cuda_base.py", "open"): "a member of a CUDA wheel verified by its pinned sha256 "
    "first (zipfile.open), copied to a file the appliance writes",
    ("appliance/images/base.py", "json.loads"): "a deep copy of data in memory (json.loads(json.dumps))",
    ("appliance/images/build.py", "open"): WRITES + " (build logs)",
    ("appliance/images/builders.py", "read_text"): CHECKOUT + " (Dockerfile) and build logs",
    ("appliance/images/compile_check.py", "read_text"): "the iidfile docker wrote",
    ("appliance/images/compile_check.py", "open"): WRITES + " (build logs)",
    ("appliance/models/synth.py", "read_bytes"): "the header the synthesizer wrote a moment before",
    ("appliance/release/notices.py", "read_text"): CHECKOUT + " (pyproject.toml)",
    ("appliance/release/notices.py", "tomllib.loads"): CHECKOUT + " (pyproject.toml)",
}


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open":
        return "open"
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr in ("open", "read_text", "read_bytes"):
        return func.attr
    module = func.value.id if isinstance(func.value, ast.Name) else None
    if module in ("json", "tomllib") and func.attr in ("load", "loads"):
        return f"{module}.{func.attr}"
    if module == "yaml" and "load" in func.attr:
        return "yaml.load"
    return None


def reads() -> dict[tuple[str, str], list[int]]:
    """(module, call) -> the lines where appliance/ reads a file or parses JSON/YAML itself."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(REPO).as_posix()
        if module == READERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and (name := _call_name(node)) is not None:
                found.setdefault((module, name), []).append(node.lineno)
    return found


def test_every_read_in_the_package_goes_through_the_strict_readers() -> None:
    bypass = {
        f"{module}:{','.join(map(str, lines))}: {name}"
        for (module, name), lines in reads().items()
        if (module, name) not in ALLOWED
    }
    assert not bypass, (
        "these read a file or parse JSON/YAML without appliance.core.strict_load "
        "(use read_text/read_bytes/load_json/load_yaml/open_regular, or add an ALLOWED entry "
        f"with its reason): {sorted(bypass)}"
    )


def test_the_allow_list_names_only_reads_that_exist() -> None:
    stale = sorted(set(ALLOWED) - set(reads()))
    assert not stale, f"ALLOWED entries with no such call left (remove them): {stale}"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_walk_sees_a_bypass(tmp_path: Path) -> None:
    source = "import json, yaml\nfrom pathlib import Path\n"
    source += "a = json.loads(Path('x').read_text())\nb = yaml.safe_load(open('y'))\n"
    names = [
        n for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call) if (n := _call_name(node))
    ]
    assert sorted(names) == ["json.loads", "open", "read_text", "yaml.load"]
