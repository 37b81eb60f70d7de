"""A small JSON Schema (2020-12) validator for the keywords this project's schemas use.

Supported: type, const, enum, pattern, minLength, minimum, exclusiveMinimum, properties,
required, additionalProperties (false or a schema), minProperties, items, minItems, maxItems,
and $ref to
"#/$defs/NAME". A schema using any other validation keyword is refused, so a schema can
never silently ask for more than is checked.
"""

import re
from typing import Any

ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description"}
KEYWORDS = {"type", "const", "enum", "pattern", "minLength", "minimum", "exclusiveMinimum",
            "properties", "required", "additionalProperties", "minProperties", "items", "minItems",
            "maxItems", "$ref"}
TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float), "null": (type(None),),
}


class UnsupportedSchema(ValueError):
    """The schema uses a keyword this validator does not check."""


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, TYPES[name])


def _where(path: str) -> str:
    return path or "(top level)"


def _validate(value: Any, schema: dict[str, Any], root: dict[str, Any], path: str,
              errors: list[str]) -> None:
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise UnsupportedSchema(f"unsupported schema keywords at {_where(path)}: {sorted(unknown)}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise UnsupportedSchema(f"unsupported $ref {ref!r}")
        _validate(value, root["$defs"][ref.removeprefix("#/$defs/")], root, path, errors)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, n) for n in names):
            errors.append(f"{_where(path)}: expected {' or '.join(names)}, "
                          f"got {type(value).__name__}")
            return
    if "const" in schema and value != schema["const"]:
        errors.append(f"{_where(path)}: must be {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{_where(path)}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{_where(path)}: {value!r} does not match {schema['pattern']}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{_where(path)}: shorter than {schema['minLength']} characters")
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{_where(path)}: {value} is below {schema['minimum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            errors.append(f"{_where(path)}: {value} must exceed {schema['exclusiveMinimum']}")
    if isinstance(value, dict):
        _validate_object(value, schema, root, path, errors)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{_where(path)}: needs at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{_where(path)}: allows at most {schema['maxItems']} items")
        for index, item in enumerate(value if "items" in schema else []):
            _validate(item, schema["items"], root, f"{path}[{index}]", errors)


def _validate_object(value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any],
                     path: str, errors: list[str]) -> None:
    for key in schema.get("required", []):
        if key not in value:
            errors.append(f"{_where(path)}: missing field {key!r}")
    if len(value) < schema.get("minProperties", 0):
        errors.append(f"{_where(path)}: needs at least {schema['minProperties']} entries")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        if key in properties:
            _validate(item, properties[key], root, child, errors)
        elif extra is False:
            errors.append(f"{_where(path)}: unknown field {key!r}")
        elif isinstance(extra, dict):
            _validate(item, extra, root, child, errors)


def validate(value: Any, schema: dict[str, Any]) -> list[str]:
    """Every violation of schema by value, one line each naming the field; [] when valid."""
    errors: list[str] = []
    _validate(value, schema, schema, "", errors)
    return errors
