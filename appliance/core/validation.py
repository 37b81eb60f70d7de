"""Validation of the lock, profiles and evidence findings against their JSON Schemas.

The schemas ship as package data in `appliance/schemas/` (draft-07, checked by the
`jsonschema` package). Each problem becomes one line naming the field by its JSON pointer
(RFC 6901), e.g. `/schedule/repeats: must be at least 1 (got 0)`.

The schemas may use only the keywords in `KEYWORDS`: a keyword `jsonschema` would silently
ignore under draft-07 (a later draft's `unevaluatedProperties`, a misspelling, `format`
without a checker) could otherwise make a schema promise more than is checked. Every object
schema must say `additionalProperties` (false, or a schema for a map), `$ref` points only
into `#/definitions/` and stands alone (draft-07 ignores a `$ref`'s siblings).
`schema_problems` lists any breach; `load_schema` refuses a schema that has one.
"""

import json
from collections.abc import Iterable
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.paths import PACKAGE_DIR

SCHEMAS_DIR = PACKAGE_DIR / "schemas"
DRAFT = "http://json-schema.org/draft-07/schema#"
ANNOTATIONS = {"$schema", "$comment", "definitions", "title", "description"}
KEYWORDS = {
    "type",
    "const",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "properties",
    "required",
    "additionalProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "items",
    "minItems",
    "maxItems",
    "$ref",
}
MAX_ERRORS = 100
JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


def schema_path(name: str) -> Path:
    return SCHEMAS_DIR / f"{name}.schema.json"


def _walk(schema: Any, pointer: str) -> Iterable[tuple[str, dict[str, Any]]]:
    """Every subschema with its location inside the schema document."""
    if not isinstance(schema, dict):
        return
    yield pointer, schema
    for key in ("properties", "definitions"):
        for name, child in (schema.get(key) or {}).items():
            yield from _walk(child, f"{pointer}/{key}/{name}")
    for key in ("additionalProperties", "items", "propertyNames"):
        yield from _walk(schema.get(key), f"{pointer}/{key}")


def schema_problems(schema: Any) -> list[str]:
    """Every way `schema` breaks the rules in this module's docstring; [] when it keeps them."""
    if not isinstance(schema, dict):
        return ["(top level): a schema is a JSON object"]
    problems = [] if schema.get("$schema") == DRAFT else [f"$schema: must be {DRAFT}"]
    for where, sub in _walk(schema, ""):
        where = where or "(top level)"
        unknown = sorted(set(sub) - KEYWORDS - ANNOTATIONS)
        if unknown:
            problems.append(f"{where}: keywords this project does not check: {', '.join(unknown)}")
        types = sub.get("type")
        is_object = "properties" in sub or types == "object" or isinstance(types, list) and "object" in types
        if is_object and "additionalProperties" not in sub:
            problems.append(f"{where}: an object schema must set additionalProperties")
        if "$ref" in sub:
            if not str(sub["$ref"]).startswith("#/definitions/"):
                problems.append(f"{where}: $ref must point into #/definitions/")
            if set(sub) - ANNOTATIONS - {"$ref"}:
                problems.append(f"{where}: $ref must stand alone (draft-07 ignores its siblings)")
    return problems


@cache
def _schema_text(name: str) -> str:
    try:
        return schema_path(name).read_text()
    except FileNotFoundError:
        raise ApplianceError(
            f"{schema_path(name)}: schema missing from the installed package (reinstall the appliance)"
        ) from None


def load_schema(name: str) -> dict[str, Any]:
    """The schema `appliance/schemas/NAME.schema.json`, after the keyword check."""
    schema: dict[str, Any] = json.loads(_schema_text(name))
    problems = schema_problems(schema)
    if problems:
        raise ApplianceError(f"{schema_path(name)}: {problems[0]}")
    return schema


def _strict_int(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


@lru_cache(maxsize=8)
def _validator(schema_text: str) -> Any:
    import jsonschema

    base = jsonschema.Draft7Validator
    strict = jsonschema.validators.extend(
        base, type_checker=base.TYPE_CHECKER.redefine("integer", _strict_int)
    )
    return strict(json.loads(schema_text))


def pointer(parts: Iterable[Any]) -> str:
    """The RFC 6901 JSON pointer of a path; "(top level)" for the document itself."""
    text = "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)
    return text or "(top level)"


def _show(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(value: Any) -> str:
    return JSON_TYPES.get(type(value), type(value).__name__)


def _problem(keyword: str, expected: Any, instance: Any, schema: dict[str, Any]) -> str:
    """What is wrong, for one failed keyword."""
    if keyword == "type":
        names = expected if isinstance(expected, list) else [expected]
        return f"expected {' or '.join(names)}, got {_type_name(instance)}"
    if keyword == "enum":
        choices = ", ".join(c if isinstance(c, str) else json.dumps(c) for c in expected)
        return f"{_show(instance)} is not one of {choices}"
    if keyword == "const":
        return f"must be {json.dumps(expected)}, got {_show(instance)}"
    if keyword == "pattern":
        if "title" in schema:
            return f"{_show(instance)} is not {schema['title']}"
        return f"{_show(instance)} does not match {expected}"
    if keyword == "minLength":
        return "must not be empty" if expected == 1 else f"needs at least {expected} characters"
    bounds = {
        "minimum": "must be at least",
        "maximum": "must be at most",
        "exclusiveMinimum": "must be more than",
    }
    if keyword in bounds:
        return f"{bounds[keyword]} {expected} (got {_show(instance)})"
    counts = {
        "maxLength": "allows at most {} characters",
        "minItems": "needs at least {} items",
        "maxItems": "allows at most {} items",
        "minProperties": "needs at least {} entries",
        "maxProperties": "allows at most {} entries",
    }
    if keyword in counts:
        return counts[keyword].format(expected)
    return f"fails {keyword} {_show(expected)}"


def _lines(error: Any) -> list[str]:
    path = list(error.absolute_path)
    keyword, instance, schema = error.validator, error.instance, error.schema
    if keyword == "required":
        return [
            f"{pointer([*path, key])}: missing field"
            for key in error.validator_value
            if isinstance(instance, dict) and key not in instance
        ]
    if keyword == "additionalProperties" and error.validator_value is False:
        allowed = ", ".join(schema.get("properties", {}))
        extra = [k for k in instance if k not in schema.get("properties", {})]
        return [f"{pointer([*path, key])}: unknown field (allowed: {allowed})" for key in extra]
    if "propertyNames" in error.relative_schema_path:
        return [
            f"{pointer([*path, instance])}: the name "
            f"{_problem(keyword, error.validator_value, instance, schema)}"
        ]
    return [f"{pointer(path)}: {_problem(keyword, error.validator_value, instance, schema)}"]


def schema_errors(instance: Any, name: str, limit: int = MAX_ERRORS) -> list[str]:
    """The violations of schema NAME by instance (at most `limit`), one line each; [] when it
    is valid.

    A document that names another `schema_version` than the schema's gets that one line
    only: the rest of it follows another schema.
    """
    schema = load_schema(name)
    version = schema.get("properties", {}).get("schema_version", {}).get("const")
    if (
        isinstance(instance, dict)
        and version is not None
        and "schema_version" in instance
        and instance["schema_version"] != version
    ):
        return [
            f"/schema_version: unsupported version {_show(instance['schema_version'])} "
            f"(this tool reads {version})"
        ]
    lines: dict[str, None] = {}  # insertion-ordered set: one line per problem
    for error in _validator(_schema_text(name)).iter_errors(instance):
        lines.update(dict.fromkeys(_lines(error)[:limit]))
        if len(lines) >= limit:
            break
    return list(lines)[:limit]


def validate(instance: Any, name: str, path: Path) -> None:
    """Raise one ConfigError line naming path and the first bad field; return when valid."""
    errors = schema_errors(instance, name)
    if errors:
        raise_for(path, errors)


def raise_for(path: Path, errors: list[str]) -> None:
    """One ConfigError line: the first error and how many more (counted up to MAX_ERRORS)."""
    count = f"{len(errors) - 1}" if len(errors) < MAX_ERRORS else f"at least {len(errors) - 1}"
    more = f" (and {count} more)" if len(errors) > 1 else ""
    raise ConfigError(f"{path}: {errors[0]}{more}")
