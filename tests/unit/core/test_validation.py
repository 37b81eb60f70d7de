"""The schemas in appliance/schemas/: checked by jsonschema, refusing what it would not check."""

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.validation import (
    MAX_ERRORS,
    SCHEMAS_DIR,
    _problem,
    _show,
    _type_name,
    load_schema,
    pointer,
    raise_for,
    schema_errors,
    schema_problems,
    validate,
)
from tests.conftest import REPO

NAMES = ("finding", "lock", "profile", "trace-header")
DOCS = {
    "lock": "docs/images.md",
    "profile": "CONTRIBUTING.md",
    "finding": "docs/evidence.md",
    "trace-header": "docs/trace-format.md",
}


def test_the_package_ships_exactly_the_four_schemas() -> None:
    assert sorted(p.name for p in SCHEMAS_DIR.iterdir()) == [f"{n}.schema.json" for n in NAMES]


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_is_valid_draft_07_and_keeps_the_project_rules(name: str) -> None:
    schema = load_schema(name)
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema_problems(schema) == []


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_is_linked_from_the_document_that_describes_the_format(name: str) -> None:
    doc = REPO / DOCS[name]
    assert f"appliance/schemas/{name}.schema.json)" in doc.read_text()


def _broken(edit: Any) -> list[str]:
    schema = copy.deepcopy(load_schema("lock"))
    edit(schema)
    return schema_problems(schema)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda s: s["definitions"]["patch"].update(dependentRequired={"file": ["sha256"]}),
            "/definitions/patch: keywords this project does not check: dependentRequired",
        ),
        (
            lambda s: s["properties"]["upstream"].update(requried=["name"]),
            "/properties/upstream: keywords this project does not check: requried",
        ),
        (
            lambda s: s["definitions"]["text"].update(format="uri"),
            "/definitions/text: keywords this project does not check: format",
        ),
        (
            lambda s: s["definitions"]["patch"].pop("additionalProperties"),
            "/definitions/patch: an object schema must set additionalProperties",
        ),
        (
            lambda s: s["properties"]["stand_ins"].pop("additionalProperties"),
            "/properties/stand_ins: an object schema must set additionalProperties",
        ),
        (
            lambda s: s["definitions"]["stand_in"]["properties"]["tree"].update(
                {"$ref": "#/definitions/text"}
            ),
            "/definitions/stand_in/properties/tree: $ref must stand alone (draft-07 ignores its siblings)",
        ),
        (
            lambda s: s["properties"].update(upstream={"$ref": "https://example.invalid/x.json"}),
            "/properties/upstream: $ref must point into #/definitions/",
        ),
        (
            lambda s: s.update({"$schema": "https://json-schema.org/draft/2020-12/schema"}),
            "$schema: must be http://json-schema.org/draft-07/schema#",
        ),
    ],
)
def test_the_schema_check_refuses_what_would_go_unchecked(edit: Any, problem: str) -> None:
    assert _broken(edit) == [problem]


def test_lock_errors_name_every_field_by_json_pointer() -> None:
    raw = {
        "schema_version": 1,
        "upstream": {
            "name": "llama.cpp",
            "repository": "r",
            "commit": "x" * 40,
            "release": "b1",
            "mirror": "m",
        },
        "stand_ins": {"a/b": {}},
        "patches": {"active": [], "experimental": [], "rejected": []},
        "targets": {},
    }
    assert schema_errors(raw, "lock") == [
        "/upstream/mirror: unknown field (allowed: name, repository, commit, release)",
        f"/upstream/commit: '{'x' * 40}' is not a 40-hex-digit git commit",
        "/stand_ins/a~1b: the name 'a/b' is not a name of letters, digits, '.', '_' and '-'",
        "/stand_ins/a~1b/package: missing field",
        "/stand_ins/a~1b/version: missing field",
        "/stand_ins/a~1b/release: missing field",
        "/stand_ins/a~1b/relation: missing field",
        "/stand_ins/a~1b/sdist_sha256: missing field",
        "/stand_ins/a~1b/tree: missing field",
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (1.0, "expected integer, got number"),
        (True, "expected integer, got boolean"),
        (0, "must be at least 1 (got 0)"),
        (1001, "must be at most 1000 (got 1001)"),
        ("3", "expected integer, got string"),
    ],
)
def test_integers_are_integers(value: object, problem: str) -> None:
    raw = {
        "schedule": {
            "repeats": value,
            "order": "blocked",
            "n_predict": 1,
            "prompt": "",
            "seed": 0,
            "cold_cache": True,
        }
    }
    assert f"/schedule/repeats: {problem}" in schema_errors(raw, "profile")


def test_another_schema_version_is_the_only_error() -> None:
    assert schema_errors({"schema_version": 2, "colour": 1}, "profile") == [
        "/schema_version: unsupported version 2 (this tool reads 1)"
    ]


# --- every keyword's line, word for word, on a schema written here ---------------------------

DRAFT = "http://json-schema.org/draft-07/schema#"

KEYWORD_SCHEMA = {
    "$schema": DRAFT,
    "type": "object",
    "additionalProperties": False,
    "required": ["t", "gone"],
    "properties": {
        "t": {"type": ["integer", "null"]},
        "gone": {"type": "integer"},
        "e": {"enum": ["a", 1]},
        "c": {"const": 3},
        "p": {"type": "string", "pattern": "^x$"},
        "pt": {"type": "string", "pattern": "^x$", "title": "an x"},
        "m1": {"type": "string", "minLength": 1},
        "m3": {"type": "string", "minLength": 3},
        "mx": {"type": "string", "maxLength": 2},
        "lo": {"type": "integer", "minimum": 1},
        "hi": {"type": "integer", "maximum": 1},
        "ex": {"type": "number", "exclusiveMinimum": 0},
        "few": {"type": "array", "minItems": 2, "items": {"type": "integer"}},
        "many": {"type": "array", "maxItems": 1},
        "none": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "integer"}},
        "two": {
            "type": "object",
            "maxProperties": 1,
            "propertyNames": {"pattern": "^[a-z]+$"},
            "additionalProperties": {"type": "integer"},
        },
        "a/b~c": {"type": "integer"},
    },
}
KEYWORD_INSTANCE = {
    "t": "x",
    "e": "b",
    "c": [4],
    "p": "y" * 100,
    "pt": "y",
    "m1": "",
    "m3": "ab",
    "mx": "abc",
    "lo": 0,
    "hi": 2,
    "ex": 0,
    "few": [1.5],
    "many": [1, 2],
    "none": {},
    "two": {"A": 1, "b": 2},
    "a/b~c": "s",
    "extra": 1,
}
KEYWORD_LINES = [
    "/gone: missing field",
    "/extra: unknown field (allowed: t, gone, e, c, p, pt, m1, m3, mx, lo, hi, ex, few, many, none, "
    "two, a/b~c)",
    "/t: expected integer or null, got string",
    "/e: 'b' is not one of a, 1",
    "/c: must be 3, got [4]",
    f"/p: '{'y' * 76}... does not match ^x$",  # shown up to 77 characters
    "/pt: 'y' is not an x",
    "/m1: must not be empty",
    "/m3: needs at least 3 characters",
    "/mx: allows at most 2 characters",
    "/lo: must be at least 1 (got 0)",
    "/hi: must be at most 1 (got 2)",
    "/ex: must be more than 0 (got 0)",
    "/few: needs at least 2 items",
    "/few/0: expected integer, got number",
    "/many: allows at most 1 items",
    "/none: needs at least 1 entries",
    "/two: allows at most 1 entries",
    "/two/A: the name 'A' does not match ^[a-z]+$",
    "/a~1b~0c: expected integer, got string",
]


SchemaWriter = Callable[[str, dict[str, Any]], str]


@pytest.fixture
def write_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SchemaWriter:
    """Write a schema under a name of its own (the text is cached by name); return the name."""
    import appliance.core.validation as validation

    monkeypatch.setattr(validation, "SCHEMAS_DIR", tmp_path)

    def write(label: str, schema: dict[str, Any]) -> str:
        name = f"{label}-{tmp_path.name}"
        (tmp_path / f"{name}.schema.json").write_text(json.dumps(schema))
        return name

    return write


@pytest.fixture
def keyword_schema(write_schema: SchemaWriter) -> str:
    return write_schema("keywords", KEYWORD_SCHEMA)


def test_every_keyword_has_its_own_line(keyword_schema: str) -> None:
    assert schema_problems(KEYWORD_SCHEMA) == []
    assert sorted(schema_errors(KEYWORD_INSTANCE, keyword_schema)) == sorted(KEYWORD_LINES)


def test_errors_stop_at_the_limit(keyword_schema: str) -> None:
    assert len(schema_errors(KEYWORD_INSTANCE, keyword_schema, limit=3)) == 3
    assert schema_errors({"t": 1, "gone": 1}, keyword_schema) == []


def test_a_broken_schema_is_refused_with_its_first_problem(keyword_schema: str, tmp_path: Path) -> None:
    from appliance.core.validation import load_schema as load

    broken = {**KEYWORD_SCHEMA, "properties": {"x": {"type": "object"}, "y": {"minimum": 1, "bogus": 2}}}
    (tmp_path / f"{keyword_schema}.schema.json").write_text(json.dumps(broken))
    with pytest.raises(
        ApplianceError,
        match=re.escape(
            f"{tmp_path / keyword_schema}.schema.json: /properties/x: an object schema must set "
            "additionalProperties"
        ),
    ):
        load(keyword_schema)


@pytest.mark.parametrize(
    ("schema", "problems"),
    [
        ([], ["(top level): a schema is a JSON object"]),
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "array",
                "items": {"type": "object"},
            },
            ["/items: an object schema must set additionalProperties"],
        ),
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "additionalProperties": {"type": ["object", "null"], "x-a": 1, "x-b": 2},
            },
            [
                "/additionalProperties: keywords this project does not check: x-a, x-b",
                "/additionalProperties: an object schema must set additionalProperties",
            ],
        ),
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "additionalProperties": False,
                "propertyNames": {"type": "object"},
            },
            ["/propertyNames: an object schema must set additionalProperties"],
        ),
        ({"type": "string"}, ["$schema: must be http://json-schema.org/draft-07/schema#"]),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#", "x": 1},
            ["(top level): keywords this project does not check: x"],
        ),
    ],
)
def test_schema_rules_reach_every_subschema(schema: object, problems: list[str]) -> None:
    assert schema_problems(schema) == problems


def test_json_pointers_escape_their_parts_and_name_the_top_level() -> None:
    assert pointer([]) == "(top level)"
    assert pointer(["a/b", "c~d", 3]) == "/a~1b/c~0d/3"


def test_a_shown_value_is_cut_past_80_characters() -> None:
    assert _show("x" * 78) == repr("x" * 78)  # 80 characters with its quotes: whole
    assert _show("x" * 79) == repr("x" * 79)[:77] + "..."
    assert _show({"a": [1, None]}) == '{"a": [1, null]}'
    assert _show(Path("/some/file")) == '"/some/file"'  # what JSON cannot hold, as its text
    assert _type_name(Path("x")) == type(Path("x")).__name__
    assert (_type_name(True), _type_name(1), _type_name(None)) == ("boolean", "integer", "null")


def test_validate_raises_one_line_naming_the_file_and_counting_the_rest() -> None:
    with pytest.raises(ConfigError, match="^p/lock.json: /schema_version: missing field") as refused:
        validate({}, "lock", Path("p/lock.json"))
    assert str(refused.value) == "p/lock.json: /schema_version: missing field (and 4 more)"
    with pytest.raises(ConfigError, match="^f: /a: bad$") as one:
        raise_for(Path("f"), ["/a: bad"])
    assert str(one.value) == "f: /a: bad"
    with pytest.raises(ConfigError, match=r"^f: /0: bad \(and at least") as many:
        raise_for(Path("f"), [f"/{i}: bad" for i in range(MAX_ERRORS)])
    assert str(many.value) == f"f: /0: bad (and at least {MAX_ERRORS - 1} more)"
    with pytest.raises(ConfigError, match=r"^f: /0: bad \(and \d+ more\)$") as fewer:
        raise_for(Path("f"), [f"/{i}: bad" for i in range(MAX_ERRORS - 1)])
    assert str(fewer.value) == f"f: /0: bad (and {MAX_ERRORS - 2} more)"


def test_two_errors_say_one_more_and_an_unnamed_keyword_is_shown_as_is() -> None:
    with pytest.raises(ConfigError, match=r"^f: /a: bad \(and 1 more\)$") as two:
        raise_for(Path("f"), ["/a: bad", "/b: bad"])
    assert str(two.value) == "f: /a: bad (and 1 more)"
    assert _problem("multipleOf", 3, 7, {}) == "fails multipleOf 3"


# --- schemas without top-level properties, and a false that is no additionalProperties -------


def test_a_schema_without_properties_allows_no_field_and_has_no_version(write_schema: SchemaWriter) -> None:
    name = write_schema("closed", {"$schema": DRAFT, "type": "object", "additionalProperties": False})
    assert schema_errors({}, name) == []
    assert schema_errors({"a": 1, "b~": 2}, name) == [
        "/a: unknown field (allowed: )",
        "/b~0: unknown field (allowed: )",
    ]
    assert schema_errors({"schema_version": 9}, name) == ["/schema_version: unknown field (allowed: )"]


def test_a_const_false_is_a_const_line_not_an_unknown_field(write_schema: SchemaWriter) -> None:
    name = write_schema(
        "off",
        {
            "$schema": DRAFT,
            "type": "object",
            "additionalProperties": False,
            "properties": {"off": {"const": False}},
        },
    )
    assert schema_errors({"off": True}, name) == ["/off: must be false, got true"]
    assert schema_errors({"off": False}, name) == []


def test_properties_alone_make_an_object_schema() -> None:
    assert schema_problems({"$schema": DRAFT, "properties": {"a": {"type": "string"}}}) == [
        "(top level): an object schema must set additionalProperties"
    ]
    assert schema_problems({"$schema": DRAFT, "properties": {}, "additionalProperties": False}) == []
