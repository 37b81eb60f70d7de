"""Every budget of the strict readers at its edge: the limit itself is accepted, one past it is
refused with the reader's one line. Each limit is read from its one home, so moving it
(64 → 65 levels, 100 → 101 digits) without moving the refusal fails here."""

import json
from pathlib import Path

import pytest

from appliance.core import strict_load
from appliance.core.errors import ConfigError
from appliance.core.strict_load import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MAX_NODES,
    load_json,
    load_yaml,
    parse_json,
    parse_yaml,
)
from appliance.engine.lock import MAX_LOCK_BYTES, load_lock
from appliance.evidence.finding import MAX_FINDING_BYTES, load_finding
from appliance.runs.profile import MAX_PROFILE_BYTES, load_profile
from tests.conftest import REPO

HERE = Path("edge.json")


def _json_nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _yaml_nested(depth: int) -> str:
    """depth nested flow sequences: [[[]]] is three levels."""
    return "[" * depth + "]" * depth


def test_json_depth_at_the_limit_and_one_past() -> None:
    value = parse_json(_json_nested(MAX_DEPTH), HERE)
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == []
    with pytest.raises(ConfigError, match=rf"^edge.json: line 1: nested deeper than {MAX_DEPTH} levels$"):
        parse_json(_json_nested(MAX_DEPTH + 1), HERE)


def test_json_depth_counts_objects_and_ignores_brackets_in_strings() -> None:
    text = '{"a": ' * (MAX_DEPTH - 1) + '["[[[{{{"]' + "}" * (MAX_DEPTH - 1)
    assert parse_json(text, HERE) is not None
    deeper = '{"a": ' * MAX_DEPTH + "[]" + "}" * MAX_DEPTH
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_json(deeper, HERE)


def test_yaml_depth_at_the_limit_and_one_past() -> None:
    assert parse_yaml(_yaml_nested(MAX_DEPTH), HERE) is not None
    with pytest.raises(ConfigError, match=rf"^edge.json: line 1: nested deeper than {MAX_DEPTH} levels$"):
        parse_yaml(_yaml_nested(MAX_DEPTH + 1), HERE)


@pytest.mark.parametrize("sign", ["", "-"])
def test_integer_digits_at_the_limit_and_one_past(sign: str) -> None:
    at = sign + "9" * MAX_INT_DIGITS
    assert parse_json(f"[{at}]", HERE) == [int(at)]
    assert parse_yaml(f"[{at}]", HERE) == [int(at)]
    past = sign + "9" * (MAX_INT_DIGITS + 1)
    line = f"line 1: a number with more than {MAX_INT_DIGITS} digits"
    with pytest.raises(ConfigError, match=f"^edge.json: {line}$"):
        parse_json(f"[{past}]", HERE)
    with pytest.raises(ConfigError, match=f"^edge.json: {line}$"):
        parse_yaml(f"[{past}]", HERE)


def _alias_document(weight: int) -> str:
    """A YAML sequence of n items, one anchored list of m scalars and n-1 aliases to it: it
    expands to 1 + n·(m + 1) values; (m, n) chosen so that this is exactly `weight`."""
    total = weight - 1
    m_plus_1 = next(d for d in range(int(total**0.5), 1, -1) if total % d == 0)
    n, m = total // m_plus_1, m_plus_1 - 1
    assert 1 + n * (m + 1) == weight and m >= 1 and n >= 2
    return "- &a [" + ", ".join(["0"] * m) + "]\n" + "- *a\n" * (n - 1)


def test_yaml_alias_expansion_at_the_limit_and_one_past(tmp_path: Path) -> None:
    value = parse_yaml(_alias_document(MAX_NODES), HERE)
    assert 1 + sum(1 + len(item) for item in value) == MAX_NODES
    with pytest.raises(ConfigError, match=f"expands to more than {MAX_NODES} values"):
        parse_yaml(_alias_document(MAX_NODES + 1), HERE)


def test_default_byte_budget_at_the_limit_and_one_past(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b"[]" + b" " * (strict_load.MAX_BYTES - 2))
    assert load_json(path) == [] and load_yaml(path) == []
    path.write_bytes(b"[]" + b" " * (strict_load.MAX_BYTES - 1))
    for load in (load_json, load_yaml):
        with pytest.raises(ConfigError, match=f"larger than {strict_load.MAX_BYTES} bytes"):
            load(path)


def padded(source: Path, target: Path, size: int, comment: bytes) -> Path:
    """source's bytes followed by a comment line (YAML) or spaces (JSON) to exactly size."""
    data = source.read_bytes()
    pad = size - len(data)
    assert pad > len(comment) + 1
    target.write_bytes(data + (comment + b"x" * (pad - len(comment) - 1) + b"\n" if comment else b" " * pad))
    assert target.stat().st_size == size
    return target


def test_profile_budget_at_the_limit_and_one_past(tmp_path: Path) -> None:
    builtin = REPO / "appliance" / "profiles" / "qwen35-8g.yaml"
    at = padded(builtin, tmp_path / "qwen35-8g.yaml", MAX_PROFILE_BYTES, b"# ")
    assert load_profile(str(at)).name == "qwen35-8g"
    padded(builtin, at, MAX_PROFILE_BYTES + 1, b"# ")
    with pytest.raises(ConfigError, match=f"larger than {MAX_PROFILE_BYTES} bytes"):
        load_profile(str(at))


def test_lock_budget_at_the_limit_and_one_past(tmp_path: Path) -> None:
    lock = REPO / "engine" / "llama.cpp.lock.json"
    at = padded(lock, tmp_path / "lock.json", MAX_LOCK_BYTES, b"")
    assert load_lock(at).raw == json.loads(lock.read_text())
    padded(lock, at, MAX_LOCK_BYTES + 1, b"")
    with pytest.raises(ConfigError, match=f"larger than {MAX_LOCK_BYTES} bytes"):
        load_lock(at)


def test_finding_budget_at_the_limit_and_one_past(tmp_path: Path) -> None:
    finding = sorted((REPO / "evidence").glob("*.json"))[0]
    at = padded(finding, tmp_path / finding.name, MAX_FINDING_BYTES, b"")
    assert load_finding(at).id == json.loads(finding.read_text())["id"]
    padded(finding, at, MAX_FINDING_BYTES + 1, b"")
    with pytest.raises(ConfigError, match=f"larger than {MAX_FINDING_BYTES} bytes"):
        load_finding(at)


def test_the_documented_depth_is_the_enforced_one() -> None:
    """Moving MAX_DEPTH (64 → 65) without the documents that promise it fails here."""
    assert f"nesting deeper than {MAX_DEPTH} levels" in (REPO / "docs" / "evidence.md").read_text()
    assert f"nested deeper than {MAX_DEPTH} levels" in (REPO / "docs" / "trace-format.md").read_text()
