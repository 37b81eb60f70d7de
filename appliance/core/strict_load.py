"""Strict readers for the JSON and YAML files a user hands the appliance.

Every refusal is one `ConfigError` line naming the file (and the line where one applies):
a path that is not a regular file (a directory, device, pipe or socket), a file larger than
the reader's budget, bytes that are not UTF-8, nesting deeper than `MAX_DEPTH`, a duplicate
key, a number JSON cannot represent (NaN, infinities, integers longer than
`MAX_INT_DIGITS`), a YAML mapping key that is not a string, a YAML alias that refers to its
own ancestor or expands beyond `MAX_NODES` nodes. What comes back is plain JSON data: dicts
with string keys, lists, strings, ints, finite floats, booleans and None (YAML timestamps and
binary scalars excepted; a schema refuses them by type).
"""

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent

from appliance.core.errors import ConfigError

MAX_BYTES = 16 << 20
MAX_DEPTH = 64
MAX_NODES = 1_000_000
MAX_INT_DIGITS = 100


def read_text(path: Path, max_bytes: int = MAX_BYTES, missing: str = "file not found") -> str:
    """The UTF-8 text of a regular file of at most max_bytes; `missing` is the not-found line."""
    return decode_utf8(read_bytes(path, max_bytes, missing), path)


def read_bytes(path: Path, max_bytes: int = MAX_BYTES, missing: str = "file not found") -> bytes:
    """The bytes of a regular file of at most max_bytes; `missing` is the not-found line.

    Opened by open_regular (so never a FIFO, device or socket)."""
    fd = open_regular(path, missing)
    try:
        info = os.fstat(fd)
        if info.st_size > max_bytes:
            raise ConfigError(f"{path}: larger than {max_bytes} bytes, the most this reader accepts")
        chunks, size = [], 0
        while size <= max_bytes and (chunk := os.read(fd, min(1 << 20, max_bytes + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise ConfigError(f"{path}: larger than {max_bytes} bytes, the most this reader accepts")
    return data


def decode_utf8(data: bytes, path: Path | str) -> str:
    """data as UTF-8 text; ConfigError naming path, line and byte otherwise."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}: line {line}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def open_regular(path: Path, missing: str = "file not found") -> int:
    """A read-only descriptor of the regular file at path (symlinks followed); ConfigError otherwise.

    What is not a regular file is refused from its stat, before it is opened, so a FIFO or a
    device is never opened at all; the open is non-blocking and the descriptor is checked
    again, in case the path was swapped in between. The caller closes the descriptor."""
    try:
        _refuse_special(path, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: {missing}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot open: {exc.strerror or exc}") from None
    try:
        _refuse_special(path, os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refuse_special(path: Path, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{path}: is not a regular file (a device, pipe or socket)")


# --- JSON ------------------------------------------------------------------------------------

_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]|[^\s\[\]{}:,"]+')
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_NON_FINITE = ("NaN", "Infinity", "-Infinity")
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


class _Refused(ValueError):
    """A value json accepts that this reader does not; located afterwards by _locate."""


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _too_deep(text: str, max_depth: int) -> int | None:
    """The offset where nesting first exceeds max_depth, or None."""
    depth = 0
    for match in _BRACKETS.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > max_depth:
                return match.start()
        elif char in "]}":
            depth -= 1
    return None


def _tokens(text: str) -> Iterator[re.Match[str]]:
    return _JSON_TOKEN.finditer(text)


def _locate(text: str) -> tuple[int, str] | None:
    """Offset and description of the first duplicate key or unrepresentable number."""
    stack: list[dict[str, int] | None] = []  # per open container: keys seen (None: array)
    expect_key = False
    for match in _tokens(text):
        token, pos = match.group(), match.start()
        if token == "{":
            stack.append({})
            expect_key = True
        elif token == "[":
            stack.append(None)
        elif token in "]}":
            if stack:
                stack.pop()
            expect_key = False
        elif token == ",":
            expect_key = bool(stack) and stack[-1] is not None
        elif token == ":":
            expect_key = False
        elif token.startswith('"'):
            keys = stack[-1] if stack else None
            if expect_key and keys is not None:
                key = json.loads(token)
                if key in keys:
                    return pos, (f"duplicate key {key!r} (first at line {_line(text, keys[key])})")
                keys[key] = pos
            expect_key = False
        elif token in _NON_FINITE:
            return pos, f"{token} is not a JSON number"
        elif re.fullmatch(r"-?[0-9]+", token) and len(token.lstrip("-")) > MAX_INT_DIGITS:
            return pos, f"a number with more than {MAX_INT_DIGITS} digits"
        elif _NUMBER.fullmatch(token) and not math.isfinite(float(token)):
            return pos, f"{token} is too large for a number"
    return None


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _Refused("duplicate key")
    return value


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"a number with more than {MAX_INT_DIGITS} digits")
    return int(digits)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"{text} is too large for a number")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _encodes(value: Any) -> bool:
    """Whether every string in value (keys included) encodes as UTF-8: JSON's \\uD800-style
    escapes can spell a lone surrogate, which no output can print."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def parse_json(text: str, path: Path | str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON text read strictly; errors name path and line."""
    deep = _too_deep(text, max_depth)
    if deep is not None:
        raise ConfigError(f"{path}: line {_line(text, deep)}: nested deeper than {max_depth} levels")
    value = _parse_json(text, path)
    escape = _SURROGATE_ESCAPE.search(text)
    if escape is not None and not _encodes(value):  # only an escape can make a surrogate
        line = _line(text, escape.start())
        raise ConfigError(f"{path}: line {line}: a lone surrogate (a \\u escape) is not Unicode text")
    return value


def _parse_json(text: str, path: Path | str) -> Any:
    try:
        return json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_constant=_no_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
        )
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except (ValueError, RecursionError) as exc:
        found = _locate(text)
        if found is None:
            raise ConfigError(f"{path}: not valid JSON: {exc}") from None
        pos, what = found
        raise ConfigError(f"{path}: line {_line(text, pos)}: {what}") from None


def load_json(path: Path, max_bytes: int = MAX_BYTES, missing: str = "file not found") -> Any:
    return parse_json(read_text(path, max_bytes, missing), path)


def parse_json_bytes(data: bytes, where: Path | str, max_bytes: int = MAX_BYTES) -> Any:
    """JSON bytes that did not come from a file of their own (a DSSE payload, a label), read
    as strictly as a file: budget, UTF-8, depth, duplicate keys, numbers."""
    if len(data) > max_bytes:
        raise ConfigError(f"{where}: larger than {max_bytes} bytes, the most this reader accepts")
    return parse_json(decode_utf8(data, where), where)


# --- YAML ------------------------------------------------------------------------------------


class _Refusal(yaml.MarkedYAMLError):
    """Well-formed YAML this reader refuses."""


try:  # libyaml scans and parses about five times faster; composing stays in Python
    from yaml._yaml import CParser as _Parser
except ImportError:  # a PyYAML built without libyaml

    class _Parser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)


class _StrictLoader(
    yaml.composer.Composer, _Parser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver
):
    """A safe loader that bounds depth and alias expansion and refuses duplicate or
    non-string keys, non-finite floats and over-long integers. The Python composer comes
    first in the MRO, so every node passes compose_node below even over libyaml's parser."""

    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._depth = 0
        self._weights: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()
        if self.check_event(AliasEvent) and event.anchor in self.anchors:
            target = self.anchors[event.anchor]
            if id(target) not in self._weights:
                raise _Refusal(
                    problem=f"alias *{event.anchor} refers to a node that contains it",
                    problem_mark=event.start_mark,
                )
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refusal(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=event.start_mark)
        try:
            node: Any = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        children = node.value if isinstance(node.value, list) else []
        flat = [n for item in children for n in (item if isinstance(item, tuple) else (item,))]
        weight = 1 + sum(self._weights.get(id(child), 1) for child in flat)
        if weight > MAX_NODES:
            raise _Refusal(
                problem=f"expands to more than {MAX_NODES} values (through aliases)",
                problem_mark=event.start_mark,
            )
        self._weights[id(node)] = weight
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise _Refusal(
                        problem="merge keys (<<) are not accepted", problem_mark=key_node.start_mark
                    )
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, str):
                    raise _Refusal(
                        problem=f"key {key!r} is not a string (quote it)", problem_mark=key_node.start_mark
                    )
                if key in seen:
                    raise _Refusal(
                        problem=f"duplicate key {key!r} (first at line {seen[key].line + 1})",
                        problem_mark=key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_bounded_int(self, node: Any) -> int:
        text = str(self.construct_scalar(node))
        if sum(c.isdigit() for c in text) > MAX_INT_DIGITS:
            raise _Refusal(
                problem=f"a number with more than {MAX_INT_DIGITS} digits", problem_mark=node.start_mark
            )
        value: int = self.construct_yaml_int(node)
        return value

    def construct_finite_float(self, node: Any) -> float:
        value: float = self.construct_yaml_float(node)
        if not math.isfinite(value):
            raise _Refusal(
                problem=f"{self.construct_scalar(node)} is not a finite number", problem_mark=node.start_mark
            )
        return value


_StrictLoader.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:int", _StrictLoader.construct_bounded_int
)
_StrictLoader.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:float", _StrictLoader.construct_finite_float
)


def _yaml_line(exc: yaml.YAMLError, text: str) -> int | None:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return int(mark.line) + 1
    if isinstance(exc, yaml.reader.ReaderError):
        return _line(text, exc.position)
    return None


def parse_yaml(text: str, path: Path | str) -> Any:
    """One YAML document read strictly; errors name path and line."""
    loader = None
    try:
        loader = _StrictLoader(text)
        return loader.get_single_data()
    except _Refusal as exc:
        raise ConfigError(f"{path}: line {_yaml_line(exc, text)}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        line = _yaml_line(exc, text)
        where = f" at line {line}" if line is not None else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or exc
        raise ConfigError(f"{path}: not valid YAML{where}: {' '.join(str(problem).split())}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: Path, max_bytes: int = MAX_BYTES, missing: str = "file not found") -> Any:
    return parse_yaml(read_text(path, max_bytes, missing), path)
