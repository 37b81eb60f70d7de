"""Lint and types are part of the suite, so CI enforces them."""

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

from tests.conftest import REPO


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "appliance", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "appliance"], cwd=REPO, capture_output=True, text=True
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
