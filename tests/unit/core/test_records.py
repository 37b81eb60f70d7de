"""The typed-record base: to_json/from_json, strict reading (one line naming the file and
the key), and the JSON schema derived from the fields."""

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

import jsonschema
import pytest

from appliance.core.errors import ConfigError
from appliance.core.records import Record
from appliance.core.validation import schema_problems


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Part(Record):
    label: str
    weight: float | None = None


@dataclass(frozen=True)
class Box(Record):
    WRITES_NULL: ClassVar[frozenset[str]] = frozenset({"code"})

    count: int
    colour: Colour
    code: int | None = None
    open: bool | None = None
    extra: dict[str, Any] | None = None
    parts: tuple[Part, ...] | None = None
    anything: Any = None


def test_to_json_leaves_out_none_but_writes_the_null_fields() -> None:
    box = Box(3, Colour.RED)
    assert box.to_json() == {"count": 3, "colour": "red", "code": None}
    full = Box(3, Colour.BLUE, 0, False, {"a": [1]}, (Part("x"), Part("y", 2.5)), [None])
    assert full.to_json() == {
        "count": 3,
        "colour": "blue",
        "code": 0,
        "open": False,
        "extra": {"a": [1]},
        "parts": [{"label": "x"}, {"label": "y", "weight": 2.5}],
        "anything": [None],
    }
    assert Box.from_json(full.to_json(), "box.json") == full
    assert type(Box.from_json(full.to_json(), "box.json").colour) is Colour


def test_an_int_reads_as_a_float_and_optional_keys_may_be_null_or_absent() -> None:
    assert Part.from_json({"label": "x", "weight": 2}, "p.json") == Part("x", 2)
    assert Part.from_json({"label": "x", "weight": None}, "p.json") == Part("x")
    assert Box.from_json({"count": 1, "colour": "red"}, "b.json") == Box(1, Colour.RED)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "b.json: must be a JSON object"),
        ({"count": 1, "colour": "red", "lid": 1}, "b.json: unknown key 'lid' (a Box has count, colour, "),
        ({"colour": "red"}, "b.json: missing key 'count'"),
        ({"count": True, "colour": "red"}, "b.json: count: must be an integer, got bool True"),
        ({"count": 1.0, "colour": "red"}, "b.json: count: must be an integer, got float 1.0"),
        ({"count": None, "colour": "red"}, "b.json: count: must be an integer, got null"),
        ({"count": 1, "colour": "green"}, "b.json: colour: must be one of red, blue, got str 'green'"),
        ({"count": 1, "colour": "red", "open": 1}, "b.json: open: must be true or false, got int 1"),
        ({"count": 1, "colour": "red", "extra": []}, "b.json: extra: must be a JSON object, got list []"),
        ({"count": 1, "colour": "red", "parts": {}}, "b.json: parts: must be a JSON array, got dict {}"),
        ({"count": 1, "colour": "red", "parts": [{"label": "x"}, {}]}, "b.json: parts[1]: missing key"),
        (
            {"count": 1, "colour": "red", "parts": [{"label": "x", "weight": "2"}]},
            "b.json: parts[0]: weight: must be a number, got str '2'",
        ),
    ],
)
def test_from_json_refuses_with_one_line_naming_the_file_and_the_key(data: Any, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace("[", r"\[")) as caught:
        Box.from_json(data, "b.json")
    assert "\n" not in str(caught.value)


def test_the_derived_schema_keeps_the_project_rules_and_agrees_with_from_json() -> None:
    schema = Box.json_schema()
    assert schema_problems(schema) == []
    assert schema["required"] == ["count", "colour"]
    assert schema["properties"]["colour"] == {"type": "string", "enum": ["red", "blue"]}
    assert schema["properties"]["code"] == {"type": ["integer", "null"]}
    assert schema["properties"]["parts"]["items"]["properties"]["weight"] == {"type": ["number", "null"]}
    good = Box(1, Colour.RED, parts=(Part("x", 1.5),)).to_json()
    jsonschema.Draft7Validator(schema).validate(good)
    for bad in ({**good, "lid": 1}, {"colour": "red"}, {**good, "colour": "green"}, {**good, "parts": [{}]}):
        assert not jsonschema.Draft7Validator(schema).is_valid(bad)
        with pytest.raises(ConfigError, match=r"^b\.json: "):
            Box.from_json(bad, "b.json")
