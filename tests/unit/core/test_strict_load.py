"""The strict reader: every hostile file is one ConfigError line naming the file and line.

The tests after `HERE` pin the refusals word for word, at the line where the problem is, and
the reader's own bounds on what it reads (each failed a surviving mutant of strict_load.py)."""

import os
import re
import stat
import time
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.core.strict_load import (
    MAX_DEPTH,
    MAX_NODES,
    load_json,
    load_yaml,
    open_regular,
    parse_json,
    parse_json_bytes,
    parse_yaml,
    read_bytes,
    read_text,
)


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


HERE = Path("x.json")


def _refusal(call, *args: object) -> str:  # type: ignore[no-untyped-def]
    """The whole one-line message of call(*args)'s ConfigError."""
    with pytest.raises(ConfigError, match=": ") as info:
        call(*args)
    return str(info.value)


def test_a_path_that_cannot_be_opened_says_why(tmp_path: Path) -> None:
    regular = tmp_path / "file"
    regular.write_text("{}")
    assert _refusal(read_text, regular / "child") == f"{regular / 'child'}: cannot open: Not a directory"


def test_a_file_that_cannot_be_read_says_why() -> None:
    mem = Path("/proc/self/mem")  # a regular file whose first page is never mapped
    assert _refusal(read_text, mem) == f"{mem}: cannot read: Input/output error"


def test_a_huge_file_is_refused_after_reading_one_byte_past_the_budget(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:
        f.truncate(1 << 40)  # 1 TiB of holes: reading it whole would take hours
    start = time.monotonic()
    assert _refusal(read_text, sparse, 3 << 20) == (
        f"{sparse}: larger than {3 << 20} bytes, the most this reader accepts"
    )
    assert time.monotonic() - start < 5


def test_the_missing_line_is_the_callers(tmp_path: Path) -> None:
    gone = tmp_path / "gone.json"
    for load in (load_json, load_yaml):
        assert _refusal(load, gone) == f"{gone}: file not found"
        assert _refusal(load, gone, 10, "no such lock (pass --lock)") == f"{gone}: no such lock (pass --lock)"


def test_not_utf8_names_the_line_counted_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(b"\n\xff\n\n")
    assert _refusal(read_text, path) == f"{path}: line 2: not UTF-8 (byte 0xff at offset 1)"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("\n[1, NaN]", "line 2: NaN is not a JSON number"),
        ('{"a": "a",\n "b": NaN}', "line 2: NaN is not a JSON number"),  # a value is not a key
        ('{"a": 1,\n "b": "a",\n "c": NaN}', "line 3: NaN is not a JSON number"),
        ('{"a": [1],\n "a": 2}', "line 2: duplicate key 'a' (first at line 1)"),
        ('[{"a": 1},\n {"a": 1}, NaN]', "line 2: NaN is not a JSON number"),
        ('["a", "a",\n NaN]', "line 2: NaN is not a JSON number"),
        (f"[{'9' * 100},\n NaN]", "line 2: NaN is not a JSON number"),
        ("[[[]]]\n\n\n", None),
        ("[[[[]]]]\n\n\n", "line 1: nested deeper than 3 levels"),
    ],
)
def test_json_refusal_at_its_line(text: str, problem: str | None) -> None:
    if problem is None:
        assert parse_json(text, HERE, max_depth=3) == [[[]]]
        return
    assert _refusal(parse_json, text, HERE, 3 if "nested" in problem else 64) == f"x.json: {problem}"


def test_json_duplicate_keys_are_per_object() -> None:
    text = '[{"a": {"b": 1}, "b": 2},\n {"a": 1},\n {"c": 1, "c": 2}]'
    assert _refusal(parse_json, text, HERE) == "x.json: line 3: duplicate key 'c' (first at line 3)"


def test_yaml_alias_expansion_counts_mapping_keys_and_values() -> None:
    """A mapping of m pairs is 1 + 2m values; n - 1 aliases of it make 1 + n(1 + 2m)."""
    m, n = 499, (MAX_NODES - 1) // 999 + 1  # one past the limit
    assert 1 + n * (1 + 2 * m) > MAX_NODES
    pairs = ", ".join(f"k{i}: 0" for i in range(m))
    text = "- &a {" + pairs + "}\n" + "- *a\n" * (n - 1)
    assert _refusal(parse_yaml, text, HERE) == (
        f"x.json: line 1: expands to more than {MAX_NODES} values (through aliases)"
    )


def test_yaml_non_string_keys_are_shown_whole() -> None:
    assert _refusal(parse_yaml, "? [a, b]\n: 1\n", HERE) == (
        "x.json: line 1: key ['a', 'b'] is not a string (quote it)"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: 1\nb: \x07\n", "not valid YAML at line 2: control characters are not allowed"),
        ("a: [1, 2\nb: 3\n", "not valid YAML at line 2: did not find expected ',' or ']'"),
        ("a: 1\n  b: 2\n", "not valid YAML at line 2: mapping values are not allowed in this context"),
    ],
)
def test_yaml_syntax_refusals_word_for_word(text: str, problem: str) -> None:
    assert _refusal(parse_yaml, text, HERE) == f"x.json: {problem}"


def test_reading_does_not_depend_on_the_working_directory(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"a": [1, 2]}')
    here = os.getcwd()
    try:
        os.chdir("/")
        assert load_json(path) == {"a": [1, 2]}
    finally:
        os.chdir(here)


def test_json_depth_follows_closing_brackets() -> None:
    siblings = "[" + "[0]," * 100 + "[0]]"  # depth 2 throughout: closes must count down by one
    assert len(parse_json(siblings, HERE, max_depth=2)) == 101
    assert _refusal(parse_json, "[[[],\n [[]]]]", HERE, 3) == "x.json: line 2: nested deeper than 3 levels"


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1,\n "\\udc00": 2\n}',  # a key
        '{"a": {"b": [1,\n "x\\uD800y"]}\n}\n',  # a string in a list in an object's value
        '[["ok"],\n "\\ud83d",\n 2]',  # a high surrogate with no low one after it
    ],
)
def test_json_lone_surrogate_escapes_are_refused_at_their_line(text: str) -> None:
    assert _refusal(parse_json, text, HERE) == (
        "x.json: line 2: a lone surrogate (a \\u escape) is not Unicode text"
    )


def test_json_surrogate_pairs_are_text() -> None:
    text = '{"\\ud83d\\ude00": ["a", {"b": "\\uD83D\\uDE00"}]}'
    assert parse_json(text, HERE) == {"\U0001f600": ["a", {"b": "\U0001f600"}]}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" + "9" * 101 + "x]", "a number with more than 100 digits"),
        ("[1e400x]", "1e400 is too large for a number"),
        ("[NaNx]", "NaN is not a JSON number"),
    ],
)
def test_json_refused_value_glued_to_garbage_is_named_by_json(text: str, problem: str) -> None:
    """json refuses the value before it reaches the garbage after it; the token the locator sees
    ("9...9x", "1e400x", "NaNx") is no number, so the line is json's own message."""
    assert _refusal(parse_json, text, HERE) == f"x.json: not valid JSON: {problem}"


def test_json_bytes_budget_utf8_and_label() -> None:
    assert parse_json_bytes(b"[1]", "label", 3) == [1]
    assert _refusal(parse_json_bytes, b"[ 1]", "label", 3) == (
        "label: larger than 3 bytes, the most this reader accepts"
    )
    assert _refusal(parse_json_bytes, b'["\xff"]', "label") == (
        "label: line 1: not UTF-8 (byte 0xff at offset 2)"
    )


def test_read_bytes_says_file_not_found_by_default(tmp_path: Path) -> None:
    assert _refusal(read_bytes, tmp_path / "gone") == f"{tmp_path / 'gone'}: file not found"


def test_a_file_longer_than_its_stat_size_is_read_one_byte_past_the_budget() -> None:
    status = Path("/proc/self/status")  # st_size 0, about a kilobyte of text
    assert os.stat(status).st_size == 0
    assert _refusal(read_bytes, status, 100) == (
        f"{status}: larger than 100 bytes, the most this reader accepts"
    )


def test_a_growing_file_is_read_in_chunks_up_to_one_byte_past_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that grew after its stat (fstat says 0 bytes here) is read 1 MiB, then the one
    byte past a 1 MiB budget, and refused: never read to its end."""
    path = tmp_path / "growing.json"
    path.write_bytes(b" " * (3 << 20))
    real_fstat, real_read, reads = os.fstat, os.read, []

    def stale_fstat(fd: int) -> os.stat_result:
        info = list(real_fstat(fd))
        info[6] = 0  # st_size
        return os.stat_result(info)

    def counted_read(fd: int, n: int) -> bytes:
        chunk = real_read(fd, n)
        reads.append(len(chunk))
        return chunk

    monkeypatch.setattr(os, "fstat", stale_fstat)
    monkeypatch.setattr(os, "read", counted_read)
    message = _refusal(read_bytes, path, 1 << 20)
    monkeypatch.undo()
    assert message == f"{path}: larger than {1 << 20} bytes, the most this reader accepts"
    assert reads == [1 << 20, 1]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": NaNx,\n "b": XX,\n "a": 2}', "line 3: duplicate key 'a' (first at line 1)"),  # XX: no bracket
        ('{"a": [NaNx] "a": 1}', "not valid JSON: NaN is not a JSON number"),  # no "," after "]": a value
        ('{"a": NaNx "x" "a"}', "not valid JSON: NaN is not a JSON number"),  # strings after strings: values
        ('[NaNx, {: "a", "a"}]', "not valid JSON: NaN is not a JSON number"),  # ":" then "a": a value
        ('NaNx, "a"', "not valid JSON: NaN is not a JSON number"),  # "," and a string outside any container
    ],
)
def test_json_after_a_value_json_refused_the_locator_reads_the_rest_token_by_token(
    text: str, problem: str
) -> None:
    """json stops at the NaN, so what follows need not be JSON: the locator still takes a key to
    be a string right after "{" or an object's ",", and nothing else."""
    assert _refusal(parse_json, text, HERE) == f"x.json: {problem}"


def test_open_regular_says_file_not_found_by_default(tmp_path: Path) -> None:
    assert _refusal(open_regular, tmp_path / "gone") == f"{tmp_path / 'gone'}: file not found"


def test_open_regular_opens_non_blocking_and_close_on_exec(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text("{}")
    fd = open_regular(path)
    try:
        assert (os.get_blocking(fd), os.get_inheritable(fd)) == (False, False)
        assert os.read(fd, 10) == b"{}"
    finally:
        os.close(fd)


def test_a_pipe_swapped_in_after_the_stat_is_refused_from_its_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path was a regular file when stat looked (faked here) and is a FIFO when opened: the
    non-blocking open returns at once, the descriptor's own stat refuses it, and it is closed."""
    fifo = tmp_path / "swapped.json"
    os.mkfifo(fifo)
    real_stat = os.stat

    def stat_before_the_swap(path: object, *args: object, **kwargs: object) -> os.stat_result:
        info = list(real_stat(path, *args, **kwargs))  # type: ignore[arg-type]
        if path == fifo:
            info[0] = stat.S_IFREG | 0o644  # st_mode
        return os.stat_result(info)

    open_fds = sorted(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "stat", stat_before_the_swap)
    message = _refusal(open_regular, fifo)
    monkeypatch.undo()
    assert message == f"{fifo}: is not a regular file (a device, pipe or socket)"
    assert sorted(os.listdir("/proc/self/fd")) == open_fds
