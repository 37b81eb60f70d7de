"""Planted bugs: the one-line bugs issue 26 names, each planted alone in a copy of the tree,
with the tests that must catch it. `make plant-bugs` (not in CI) plants each one, runs only its
tests (`pytest -x -q -p no:cacheprovider`) and requires a test failure: exit 1, not a
collection error (exit 2 or more) and not a pass (exit 0). It prints a table plant / tests /
caught and exits 1 when any plant escaped.

`tests/unit/test_plants.py` (in CI) checks that each plant's original line occurs exactly once
in its file and each named test file exists, so the table cannot go stale silently.

    python -m tests.mutation.plants            # every plant
    python -m tests.mutation.plants NAME...    # only these
    python -m tests.mutation.plants --baseline # also run each plant's tests unplanted first
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IGNORED = (".git", ".venv", "mutants", ".mypy_cache", ".ruff_cache", ".cache", "__pycache__", "*.pyc")


@dataclass(frozen=True)
class Plant:
    name: str
    file: str  # relative to the repository root
    original: str  # the whole line, exactly as it is (indentation included)
    replacement: str
    tests: tuple[str, ...]  # pytest paths or node ids relative to the root


PLANTS = (
    Plant(
        "attestation-digest check always passes",
        "appliance/attest/verify.py",
        "            recorded == actual,",
        "            True,",
        ("tests/unit/attest/test_verify_checks.py",),
    ),
    Plant(
        "sweep decode-step mask inverted",
        "appliance/analysis/sweep_analysis.py",
        "    decode = np.repeat(step_kind[pool.step] == DECODE_KIND, sizes)",
        "    decode = np.repeat(step_kind[pool.step] != DECODE_KIND, sizes)",
        ("tests/unit/analysis/test_sweep_analysis.py",),
    ),
    Plant(
        "paging capacity off by one",
        "appliance/analysis/paging.py",
        '    lru = replay_budget(setup, "lru", budget, "global")',
        '    lru = replay_budget(setup, "lru", budget + one_expert, "global")',
        ("tests/unit/analysis/test_paging.py",),
    ),
    Plant(
        "strict loader depth 64 -> 65",
        "appliance/core/strict_load.py",
        "MAX_DEPTH = 64",
        "MAX_DEPTH = 65",
        ("tests/unit/core/test_limit_edges.py",),
    ),
    Plant(
        "NextN/MTP layers ignored by the planner's accounting",
        "appliance/planner/accounting.py",
        "    layers = total_layers - nextn",
        "    layers = total_layers",
        ("tests/unit/planner/test_accounting.py",),
    ),
    Plant(
        "remote whole-request deadline not enforced",
        "appliance/planner/remote.py",
        "            deadline.watch(conn)",
        "            pass  # deadline.watch(conn)",
        (
            "tests/unit/planner/test_remote_misbehaving.py::test_a_slow_server_meets_the_whole_request_deadline",
        ),
    ),
    Plant(
        "hostile-header size bound removed",
        "appliance/models/gguf_header.py",
        "        if end > self.budget:",
        "        if False:",
        ("tests/unit/models/test_gguf_header.py",),
    ),
    Plant(
        "a regression refusal's wording changed",
        "appliance/core/strict_load.py",
        '            f"{path}: line {line}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"',
        '            f"{path}: line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at {exc.start})"',
        ("tests/unit/test_regressions.py",),
    ),
    Plant(
        "the evidence comparison's verdict turned to 'not reproduced'",
        "appliance/evidence/compare.py",
        "        result.verdict = REPRODUCED",
        "        result.verdict = NOT_REPRODUCED",
        ("tests/unit/evidence/test_compare.py",),
    ),
    Plant(
        "a ConfigError message changed",
        "appliance/cluster/join.py",
        '        raise ConfigError(f"{what}: port {one_line(port)!r} is not a number from 1 to {MAX_PORT}")',
        '        raise ConfigError(f"{what}: port {one_line(port)!r} is out of range")',
        ("tests/unit/cluster/test_join_address.py",),
    ),
)


def planted_text(plant: Plant, text: str) -> str:
    """text with the plant's one line replaced; ValueError unless the line occurs exactly once."""
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line == plant.original]
    if len(hits) != 1:
        raise ValueError(f"{plant.file}: the line of plant {plant.name!r} occurs {len(hits)} times, not once")
    lines[hits[0]] = plant.replacement
    return "\n".join(lines)


def _copy_tree(target: Path) -> None:
    shutil.copytree(REPO, target, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)


def _pytest(root: Path, tests: tuple[str, ...]) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    return result.returncode, result.stdout + result.stderr, time.monotonic() - started


def _imports_from(root: Path) -> Path:
    """Where `import appliance` resolves from inside root (must be root: the plant is there)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-c", "import appliance; print(appliance.__file__)"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip()).parent.parent


def run_plant(plant: Plant, baseline: bool) -> tuple[str, str]:
    """(caught, note): caught is "yes", "NO" (tests passed) or "ERROR" (not a test failure)."""
    with tempfile.TemporaryDirectory(prefix="plant-") as work:
        root = Path(work) / "tree"
        _copy_tree(root)
        if _imports_from(root).resolve() != root.resolve():
            return "ERROR", "the copy does not import its own appliance package"
        if baseline:
            code, output, _ = _pytest(root, plant.tests)
            if code != 0:
                return "ERROR", f"the tests fail without the plant (exit {code}): {output.splitlines()[-1:]}"
        path = root / plant.file
        path.write_text(planted_text(plant, path.read_text()))
        code, output, seconds = _pytest(root, plant.tests)
    last = output.strip().splitlines()[-1] if output.strip() else ""
    if code == 1:
        failed = [line.split()[1] for line in output.splitlines() if line.startswith("FAILED ")]
        return "yes", f"{failed[0] if failed else last} ({seconds:.0f} s)"
    if code == 0:
        return "NO", f"the tests passed with the plant: {last}"
    return "ERROR", f"exit {code}, not a test failure: {last}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="plants to run (default: all)")
    parser.add_argument("--baseline", action="store_true", help="run each plant's tests unplanted first")
    args = parser.parse_args(argv)
    chosen = [p for p in PLANTS if not args.names or p.name in args.names]
    unknown = set(args.names) - {p.name for p in PLANTS}
    if unknown:
        print(f"error: no plant named {sorted(unknown)[0]!r}; see tests/mutation/plants.py", file=sys.stderr)
        return 2
    rows = []
    for plant in chosen:
        caught, note = run_plant(plant, args.baseline)
        rows.append((plant.name, " ".join(plant.tests), caught, note))
        print(f"{caught:5} {plant.name}: {note}", file=sys.stderr, flush=True)
    print("| plant | tests | caught | first failing test (time) |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    escaped = [row for row in rows if row[2] != "yes"]
    print(f"{len(rows) - len(escaped)} of {len(rows)} plants caught")
    return 1 if escaped else 0


if __name__ == "__main__":
    sys.exit(main())
