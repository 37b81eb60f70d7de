"""The schemas in appliance/schemas/: checked by jsonschema, refusing what it would not check."""

import copy
from typing import Any

import jsonschema
import pytest

from appliance.core.validation import SCHEMAS_DIR, load_schema, schema_errors, schema_problems
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
