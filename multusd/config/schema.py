"""Strict, Go-like decoding of JSON objects into frozen dataclasses.

Upstream decodes its configuration with Go's ``encoding/json``: keys match a struct field
ignoring case (the last duplicate wins), values are never coerced (``"true"`` is not a bool,
``1.5`` is not an int), unknown keys are ignored. This module does the same for dataclasses
whose fields carry their JSON key, and names the offending key in one line on failure.

It replaces pydantic, which the first design used: importing it and building our two models
cost the daemon 10 MiB of its ~44 MiB budget (measured: 47.5 vs 37.9 MiB RSS), for parsing a
small file once.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")
_JSON_KEY = "json"
_HINTS: dict[type, dict[str, Any]] = {}


class SchemaError(ValueError):
    """``key 'a.b': <problem>``; ``key`` is the dotted JSON path."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"key {key!r}: {problem}")
        self.key = key
        self.problem = problem


def json_field(key: str, default: Any = dataclasses.MISSING, *, factory: Any = None) -> Any:
    """A dataclass field decoded from the JSON key ``key``."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={_JSON_KEY: key})
    return dataclasses.field(default=default, metadata={_JSON_KEY: key})


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _shown(value: object) -> str:
    if isinstance(value, str | int | float) and value is not None:
        return f"{_kind(value)} ({json.dumps(value)[:40]})"
    return _kind(value)


def _convert(hint: Any, value: Any, key: str) -> Any:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None and type(None) in options:
            return None
        (inner,) = [o for o in options if o is not type(None)]
        return _convert(inner, value, key)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise SchemaError(key, f"expected a boolean, got {_shown(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)  # JSON has one number type: 5.0 is an int, as in Go
        raise SchemaError(key, f"expected an integer, got {_shown(value)}")
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise SchemaError(key, f"expected a number, got {_shown(value)}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise SchemaError(key, f"expected a string, got {_shown(value)}")
    if origin is list:
        if not isinstance(value, list):
            raise SchemaError(key, f"expected an array, got {_shown(value)}")
        (item,) = get_args(hint)
        return [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(key, f"expected an object, got {_shown(value)}")
        _, item = get_args(hint)
        return {k: _convert(item, v, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, dict):
            raise SchemaError(key, f"expected an object, got {_shown(value)}")
        return decode(hint, value, prefix=f"{key}.")
    raise TypeError(f"unsupported field type {hint!r}")  # a bug in a schema, not in input


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def decode(cls: type[T], raw: Mapping[str, Any], *, prefix: str = "") -> T:
    """Build ``cls`` from ``raw``; unknown keys go to a field named ``extra`` if it has one."""
    fields = {f.metadata.get(_JSON_KEY, f.name).lower(): f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = _hints(cls)
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in raw.items():
        field = fields.get(key.lower())
        if field is None or field.name == "extra":
            extra[key] = value
            continue
        values[field.name] = _convert(
            hints[field.name], value, prefix + field.metadata.get(_JSON_KEY, key)
        )
    if "extra" in {f.name for f in dataclasses.fields(cls)}:  # type: ignore[arg-type]
        values["extra"] = extra
    try:
        return cls(**values)
    except ValueError as exc:  # a field validator in __post_init__
        if isinstance(exc, SchemaError):
            raise SchemaError(prefix + exc.key, exc.problem) from exc
        raise SchemaError(prefix.rstrip(".") or "(top level)", str(exc)) from exc


def check(key: str, ok: bool, problem: Callable[[], str]) -> None:
    """For ``__post_init__`` validators: raise a :class:`SchemaError` for ``key`` unless ``ok``."""
    if not ok:
        raise SchemaError(key, problem())


__all__ = ["SchemaError", "check", "decode", "json_field"]
