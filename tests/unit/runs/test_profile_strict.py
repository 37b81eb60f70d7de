"""Hostile or mistyped profiles through `appliance run`: exit 2, one line naming the file and
the line or field, nothing written."""

from pathlib import Path

import pytest

from appliance.runs.profile import PROFILES_DIR
from tests.conftest import run_cli

TINY = (PROFILES_DIR / "tiny-oversub.yaml").read_text()


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))
    }


def refused(tmp_path: Path, profile: Path) -> str:
    """`run PROFILE --dry-run`: assert exit 2, one error line, no run directory; return it."""
    (tmp_path / "models").mkdir(exist_ok=True)
    before = snapshot(tmp_path)
    result = run_cli(
        "run", str(profile), "--models", str(tmp_path / "models"), "--out", str(tmp_path / "out"), "--dry-run"
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {profile}: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert snapshot(tmp_path) == before
    return result.stderr.strip().removeprefix(f"error: {profile}: ")


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "p.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_a_byte_that_is_not_utf8(tmp_path: Path) -> None:
    data = TINY.replace("prompt: The quick", "prompt: The qu\udce9ick").encode("utf-8", "surrogateescape")
    offset = data.index(b"\xe9")
    assert refused(tmp_path, write(tmp_path, data)) == (
        f"line {line_of(TINY, 'prompt:')}: not UTF-8 (byte 0xe9 at offset {offset})"
    )


def test_a_duplicate_key_names_both_lines(tmp_path: Path) -> None:
    text = TINY.replace("  repeats: 3\n", "  repeats: 3\n  repeats: 300\n")
    first = line_of(text, "  repeats: 3\n")
    assert refused(tmp_path, write(tmp_path, text)) == (
        f"line {first + 1}: duplicate key 'repeats' (first at line {first})"
    )


def test_a_profile_path_that_is_a_directory(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.mkdir()
    assert refused(tmp_path, profile) == "is a directory, not a file"


def test_a_profile_nested_200k_deep(tmp_path: Path) -> None:
    text = TINY + "extra: " + "[" * 200_000 + "]" * 200_000 + "\n"
    assert refused(tmp_path, write(tmp_path, text)) == (
        "larger than 65536 bytes, the most this reader accepts"
    )


@pytest.mark.parametrize("nesting", ["flow", "block"])
def test_a_profile_nested_deeper_than_the_reader_goes(tmp_path: Path, nesting: str) -> None:
    if nesting == "flow":
        extra = "extra: " + "[" * 20_000 + "]" * 20_000 + "\n"
    else:
        extra = "extra:\n" + "".join(" " * i + "- \n" for i in range(1, 300))
    text = TINY + extra
    line = text.count("\n") - extra.count("\n") + 1
    # libyaml refuses deep flow nesting itself; the reader's own bound catches the rest
    assert refused(tmp_path, write(tmp_path, text)).startswith(
        (
            f"not valid YAML at line {line}: exceeded maximum nesting depth",
            f"line {line + (0 if nesting == 'flow' else 64)}: nested deeper than 64 levels",
        )
    )


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            "  repeats: 3\n",
            "  repeats: 100000000\n",
            "/schedule/repeats: must be at most 1000 (got 100000000)",
        ),
        ("  seed: 7\n", "  seed: -1\n", "/schedule/seed: must be at least 0 (got -1)"),
        ("  seed: 7\n", "  seed: 7.5\n", "/schedule/seed: expected integer, got number"),
        ("    skew: 1.0\n", "    skew: .nan\n", "line {line}: .nan is not a finite number"),
        (
            "  memory: 200MiB\n",
            "  memory: " + "9" * 400 + "MiB\n",
            "/limits/memory: allows at most 40 characters",
        ),
        (
            "  memory: 200MiB\n",
            "  memory: " + "9" * 30 + "TiB\n",
            "/limits/memory: '" + "9" * 30 + "TiB' is more than 9223372036854775807 bytes",
        ),
        (
            "  memory: 200MiB\n",
            "  memory: 1" + "0" * 30 + "\n",
            "/limits/memory: must be at most 9223372036854775807",
        ),
        (
            "  swap: 0\n",
            "  swap: 0\n  read_ahead: 130KiB\n",
            "/limits/read_ahead: '130KiB' is 133120 bytes, not a whole number of 4 KiB pages",
        ),
        ("gpu: none\n", "gpu: none\n3: x\n", "line {line}: key 3 is not a string (quote it)"),
        ("trace: true\n", "trace: yes please\n", "/trace: expected boolean, got string"),
    ],
)
def test_out_of_range_and_unrepresentable_values(tmp_path: Path, old: str, new: str, problem: str) -> None:
    assert old in TINY
    text = TINY.replace(old, new)
    problem = problem.format(line=line_of(text, new) + new.count("\n") - 1)
    assert refused(tmp_path, write(tmp_path, text)).startswith(problem)
