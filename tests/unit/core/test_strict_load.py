"""The strict reader: every hostile file is one ConfigError line naming the file and line."""

import os
import re
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.core.strict_load import MAX_DEPTH, load_json, load_yaml, parse_json, parse_yaml, read_text


def refusal(load, path: Path) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: ") as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message[len(f"{path}: ") :]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{\n  "a": 1,\n  "b": {"x": 1,\n        "x": 2}\n}', "line 4: duplicate key 'x' (first at line 3)"),
        ('{\n  "a": 1,\n  "a": 1\n}', "line 3: duplicate key 'a' (first at line 2)"),
        ('{"a":\n NaN}', "line 2: NaN is not a JSON number"),
        ('{"a": [1,\n -Infinity]}', "line 2: -Infinity is not a JSON number"),
        ('{"a": 1e400}', "line 1: 1e400 is too large for a number"),
        ('{"a":\n' + "9" * 5000 + "}", "line 2: a number with more than 100 digits"),
        ("[" * 200_000 + "]" * 200_000, f"line 1: nested deeper than {MAX_DEPTH} levels"),
        ('{"a": [1, 2', "not valid JSON: Expecting ',' delimiter at line 1"),
    ],
)
def test_json_refusals_name_the_line(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    assert refusal(load_json, path) == problem


def test_json_keys_are_independent_per_object() -> None:
    assert parse_json('[{"a": 1}, {"a": 2}, {"b": {"a": 3}}]', Path("x")) == [
        {"a": 1},
        {"a": 2},
        {"b": {"a": 3}},
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: 1\nb:\n  x: 1\n  x: 2\n", "line 4: duplicate key 'x' (first at line 3)"),
        ("a: 1\n3: x\n", "line 2: key 3 is not a string (quote it)"),
        ("a: .nan\n", "line 1: .nan is not a finite number"),
        ("a: -.inf\n", "line 1: -.inf is not a finite number"),
        ("a: " + "1" * 5000 + "\n", "line 1: a number with more than 100 digits"),
        ("a: " + ":".join(["1"] * 200) + "\n", "line 1: a number with more than 100 digits"),
        ("a: &a [1, *a]\n", "line 1: alias *a refers to a node that contains it"),
        ("a: {x: 1}\nb:\n  <<: {y: 2}\n", "line 3: merge keys (<<) are not accepted"),
        (
            "".join(" " * i + "a:\n" for i in range(200)),
            f"line {MAX_DEPTH}: nested deeper than {MAX_DEPTH} levels",
        ),
    ],
)
def test_yaml_refusals_name_the_line(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    assert refusal(load_yaml, path) == problem


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: x\nb: \x00\n", 2),
        ("a:\n\t- b\n", 2),
        ("a: 1\n---\nb: 2\n", 2),
        ("a: [1,\n  2\n", 3),
        ("[" * 200_000 + "]" * 200_000, 1),
    ],
)
def test_yaml_syntax_errors_name_the_line(tmp_path: Path, text: str, line: int) -> None:
    """The wording is the parser's (libyaml's or PyYAML's own); the line is the reader's."""
    path = tmp_path / "x.yaml"
    path.write_text(text)
    problem = refusal(load_yaml, path)
    assert problem.startswith((f"not valid YAML at line {line}: ", f"line {line}: nested deeper"))


def test_yaml_aliases_are_bounded_by_their_expansion(tmp_path: Path) -> None:
    levels = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for prev, name in zip("abcdefg", "bcdefgh", strict=True):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(levels) + "\n")
    assert refusal(load_yaml, path) == "line 6: expands to more than 1000000 values (through aliases)"
    # a modest alias is fine: shared blocks in a profile are ordinary YAML
    assert parse_yaml("a: &e {K: '1'}\nb: [*e, *e]\n", path) == {
        "a": {"K": "1"},
        "b": [{"K": "1"}, {"K": "1"}],
    }


def test_yaml_result_is_json_data() -> None:
    assert parse_yaml("a: [1, 2.5, true, null, 'x']\n'3': y\n", Path("x")) == {
        "a": [1, 2.5, True, None, "x"],
        "3": "y",
    }


@pytest.mark.parametrize("load", [load_json, load_yaml])
def test_invalid_utf8_names_the_line(tmp_path: Path, load) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.txt"
    path.write_bytes(b'{"a":\n "\xff"}')
    assert refusal(load, path) == "line 2: not UTF-8 (byte 0xff at offset 8)"


def test_directories_and_special_files_are_refused(tmp_path: Path) -> None:
    assert refusal(read_text, tmp_path) == "is a directory, not a file"
    assert refusal(read_text, Path("/dev/null")) == "is not a regular file (a device, pipe or socket)"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it must not wait for a writer
    assert refusal(read_text, fifo) == "is not a regular file (a device, pipe or socket)"
    assert refusal(read_text, tmp_path / "missing") == "file not found"


def test_size_budget(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(" " * 1001)
    with pytest.raises(ConfigError, match="larger than 1000 bytes"):
        read_text(path, max_bytes=1000)
    assert read_text(path, max_bytes=1001) == " " * 1001
