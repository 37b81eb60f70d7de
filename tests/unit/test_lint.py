"""Lint and types are part of the suite, so CI enforces them."""

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import yaml

from tests.conftest import REPO


def lint_trees() -> list[str]:
    """The trees `make lint` checks (the Makefile's LINT_TREES): the suite checks the same."""
    found = re.search(r"^LINT_TREES := (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert found is not None, "the Makefile defines LINT_TREES"
    return found.group(1).split()


def test_lint_covers_the_package_its_tests_fuzz_and_bench() -> None:
    assert lint_trees() == ["appliance", "tests", "fuzz", "bench"]


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", *lint_trees()],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_formatter_would_change_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *lint_trees()],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_make_alone_prints_the_targets_and_runs_nothing_else() -> None:
    # as typed at a shell: not as a sub-make of `make test`, which would print its directory
    alone = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    dry = subprocess.run(["make", "-n"], cwd=REPO, capture_output=True, text=True, env=alone)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [dry.stdout.splitlines()[0]] and "awk" in dry.stdout
    shown = subprocess.run(["make", "-s"], cwd=REPO, capture_output=True, text=True, env=alone)
    assert shown.returncode == 0, shown.stderr
    listed = {line.split()[0] for line in shown.stdout.splitlines()}
    assert {"help", "venv", "test", "lint", "demo", "fuzz", "release-check"} <= listed
    assert "pip" not in dry.stdout and "bootstrap" not in dry.stdout


def test_the_pre_commit_hooks_are_local_and_cover_the_lint_trees() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    hooks = {hook["id"]: hook for hook in config["repos"][0]["hooks"]}
    assert set(hooks) == {"ruff", "ruff-format", "mypy"}
    for name in ("ruff", "ruff-format"):
        assert hooks[name]["files"] == f"^({'|'.join(lint_trees())})/"
        assert hooks[name]["language"] == "system"


def test_mypy_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "appliance", "fuzz", "bench"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


PROCESS_NOTE = re.compile(
    r"\b(the lead|lead (registers|wires)|wires? (this|it|up)|"
    r"another engineer|(this|the) issue|TODO|FIXME)\b",
    re.IGNORECASE,
)


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((getattr(node, "lineno", 1), doc))
    return found


def test_code_carries_no_process_notes() -> None:
    """Comments say what the code cannot; who wires what belongs in commits and issues."""
    notes = [
        f"{path.relative_to(REPO)}:{line}: {text.strip()[:80]}"
        for path in sorted((REPO / "appliance").rglob("*.py"))
        for line, text in _comments_and_docstrings(path)
        if PROCESS_NOTE.search(text)
    ]
    assert notes == []
    assert PROCESS_NOTE.search("(the lead registers `build` under the group)")
