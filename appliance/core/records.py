"""Typed JSON records: a frozen dataclass per record, each key spelled once, as a field.

A record class derives from `Record`; its fields are its JSON keys, in the order written.
`to_json()` is the JSON object as written (a field that is None is left out, unless the class
names it in `WRITES_NULL`); `from_json(data, source)` reads one strictly: an unknown key, a
missing required key (a field without a default) or a value of another type is one
`ConfigError` naming `source` (the file) and the key. Fields with a default are optional, so
records written before a field existed still read. `json_schema()` is the draft-07 schema
derived from the fields, in the subset `appliance.core.validation` checks.

Field types a record may use: str, int, float (an int is accepted), bool, a StrEnum (its
values), `dict[str, Any]` (any JSON object), `dict[str, Record]` (a JSON object of records),
`Any`, another Record, `tuple[Record, ...]` (a JSON array), and any of these `| None`.
"""

import types
from dataclasses import MISSING, fields
from enum import StrEnum
from typing import Any, ClassVar, Self, Union, get_args, get_origin, get_type_hints

from appliance.core.errors import ConfigError

SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"
_SCALARS: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _optional(hint: Any) -> tuple[Any, bool]:
    """(the hint without None, whether None is allowed)."""
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) != len(get_args(hint)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return hint, False


def _type_name(hint: Any) -> str:
    if isinstance(hint, type) and issubclass(hint, Record):
        return "a JSON object"
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return "one of " + ", ".join(str(v) for v in hint)
    if get_origin(hint) is tuple:
        return "a JSON array"
    if get_origin(hint) is dict:
        return "a JSON object"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[hint]


def _read(hint: Any, value: Any, where: str) -> Any:
    """value read as `hint`, or a ConfigError naming `where`."""
    if hint is Any:
        return value
    inner, nullable = _optional(hint)
    if value is None:
        if nullable:
            return None
        raise ConfigError(f"{where}: must be {_type_name(inner)}, got null")
    ok: bool
    if isinstance(inner, type) and issubclass(inner, Record):
        return inner.from_json(value, where)
    if isinstance(inner, type) and issubclass(inner, StrEnum):
        if isinstance(value, str) and value in set(inner):
            return inner(value)
        ok = False
    elif get_origin(inner) is tuple:
        (item,) = get_args(inner)[:1]
        if isinstance(value, list):
            return tuple(_read(item, v, f"{where}[{i}]") for i, v in enumerate(value))
        ok = False
    elif get_origin(inner) is dict:
        item = get_args(inner)[1]
        if isinstance(value, dict) and item is not Any:
            return {k: _read(item, v, f"{where}[{k!r}]") for k, v in value.items()}
        ok = isinstance(value, dict)
    elif inner is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif inner is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, inner)
    if not ok:
        raise ConfigError(f"{where}: must be {_type_name(inner)}, got {type(value).__name__} {value!r:.60}")
    return value


def _written(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, tuple):
        return [_written(v) for v in value]
    if isinstance(value, dict):
        return {k: _written(v) for k, v in value.items()}
    if isinstance(value, StrEnum):
        return str(value)
    return value


def _schema(hint: Any) -> dict[str, Any]:
    if hint is Any:
        return {}
    inner, nullable = _optional(hint)
    schema: dict[str, Any]
    if isinstance(inner, type) and issubclass(inner, Record):
        schema = inner.json_schema(top=False)
    elif isinstance(inner, type) and issubclass(inner, StrEnum):
        schema = {"type": "string", "enum": [str(v) for v in inner]}
    elif get_origin(inner) is tuple:
        schema = {"type": "array", "items": _schema(get_args(inner)[0])}
    elif get_origin(inner) is dict:
        item = get_args(inner)[1]
        schema = {"type": "object", "additionalProperties": True if item is Any else _schema(item)}
    else:
        schema = {"type": _SCALARS[inner]}
    if nullable:
        schema["type"] = [schema["type"], "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
    return schema


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The record class's field types, resolved once."""
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


class Record:
    """Base of the typed records (subclasses are frozen dataclasses)."""

    # fields written as null when None (every other None field is left out of to_json)
    WRITES_NULL: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def json_keys(cls) -> tuple[str, ...]:
        """Every JSON key of the record, in the order written."""
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]

    @classmethod
    def required_keys(cls) -> tuple[str, ...]:
        """The keys every record of this class has (its fields without a default)."""
        return tuple(
            f.name
            for f in fields(cls)  # type: ignore[arg-type]
            if f.default is MISSING and f.default_factory is MISSING
        )

    def to_json(self) -> dict[str, Any]:
        return {
            name: _written(getattr(self, name))
            for name in self.json_keys()
            if getattr(self, name) is not None or name in self.WRITES_NULL
        }

    @classmethod
    def from_json(cls, data: Any, source: str) -> Self:
        """The record in `data`, read strictly; `source` names the file in every refusal."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: must be a JSON object")
        unknown = sorted(set(data) - set(cls.json_keys()))
        if unknown:
            raise ConfigError(
                f"{source}: unknown key {unknown[0]!r} (a {cls.__name__} has {', '.join(cls.json_keys())})"
            )
        missing = [k for k in cls.required_keys() if k not in data]
        if missing:
            raise ConfigError(f"{source}: missing key {missing[0]!r}")
        hints = _hints(cls)
        return cls(**{k: _read(hints[k], v, f"{source}: {k}") for k, v in data.items()})

    @classmethod
    def json_schema(cls, top: bool = True) -> dict[str, Any]:
        """The draft-07 schema of the record's JSON, derived from its fields."""
        hints = _hints(cls)
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {k: _schema(hints[k]) for k in cls.json_keys()},
            "required": list(cls.required_keys()),
            "additionalProperties": False,
        }
        return {"$schema": SCHEMA_DRAFT, "title": cls.__name__, **schema} if top else schema
