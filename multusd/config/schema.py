"""Go's ``encoding/json`` rules for the pydantic models our configuration is decoded into.

Upstream decodes ``daemon-config.json``, the config generator's view of it and each request's
NetConf with Go's ``encoding/json``, so a file that works upstream must work here and one that
fails there must fail here. The models are pydantic's, the project's chosen package for typed
configuration (what it costs in memory is measured with the daemon's, docs/performance.md);
:class:`GoModel` and :func:`decode` add, once for every model, what Go does and pydantic does not:

- a key matches a field ignoring case (Go's folding, ``cni_shim.godecode.fold``), and when
  several spellings of one key are present the last one wins; pydantic matches aliases exactly;
- values are never coerced (``"true"`` is not a boolean, ``1`` is not a boolean, ``"5"`` is not
  a number): the models are strict;
- unknown keys are ignored (a model with a field named ``extra`` gets them there, verbatim);
- a failure is one line naming the dotted JSON key, ``key 'logOptions.maxAge': expected an
  integer, got a string ("5")`` (:class:`SchemaError`), not pydantic's multi-line report; the
  daemon prints it and exits, a request returns it as its CNI error message.

Two departures from Go are kept from the hand-written decoder these models replaced, so that no
file changes meaning: an integral number (``5.0``) is accepted for an integer field (:data:`Int`;
Go refuses it), and ``null`` is an error for a field that cannot be unset (Go leaves the field
as it was).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from cni_shim.godecode import fold

M = TypeVar("M", bound="GoModel")

_FROM_JSON: Final[dict[str, bool]] = {"go_json": True}
"""The validation context of :func:`decode`: only a decoded JSON object has its keys folded.
Built in Python (``LogOptions(max_age=1)``), a model takes its field names, as any other."""

EXTRA = "extra"
"""The field, if a model has one, that gets the keys no other field claims."""


class SchemaError(ValueError):
    """``key 'a.b': <problem>``; ``key`` is the dotted JSON path."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"key {key!r}: {problem}")
        self.key = key
        self.problem = problem


def _integral(value: object) -> object:
    """An integral number (``5.0``) is an integer: a departure from Go (the module doc)."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(_integral)]
"""The type of every integer field: strict, but for an integral number."""


class GoModel(BaseModel):
    """A frozen model decoded with Go's rules (the module doc).

    A field names its JSON key as its ``validation_alias``, not its ``alias``: the typed
    ``__init__`` (mypy's, through pydantic's ``dataclass_transform``) keeps the field names,
    which is how Python code and tests build a model; JSON goes through :func:`decode`.
    """

    model_config = ConfigDict(
        frozen=True,
        strict=True,
        extra="ignore",
        populate_by_name=True,  # Python callers and tests build models by field name
    )

    _go_keys: ClassVar[dict[str, str]] = {}
    """JSON key, as spelled in the model and folded, -> the key; built with the class."""
    _go_keeps_unknown: ClassVar[bool] = False

    @classmethod
    def json_fields(cls) -> dict[str, FieldInfo]:
        """The fields read from JSON, by their JSON key (``extra`` is not one)."""
        fields: dict[str, FieldInfo] = {}
        for name, info in cls.model_fields.items():
            if name == EXTRA:
                continue
            key = info.validation_alias or name
            if not isinstance(key, str):  # AliasPath, AliasChoices: not a Go struct tag
                raise TypeError(f"{cls.__name__}.{name}: the JSON key must be one string")
            fields[key] = info
        return fields

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Build the key table once per class, at import, not per decode."""
        super().__pydantic_init_subclass__(**kwargs)
        keys: dict[str, str] = {}
        for key in cls.json_fields():
            folded = fold(key)
            if keys.get(folded, key) != key:  # a bug in a model, not in input
                raise TypeError(f"{cls.__name__}: {key!r} and {keys[folded]!r} fold alike")
            keys[folded] = keys[key] = key
        cls._go_keys = keys
        cls._go_keeps_unknown = EXTRA in cls.model_fields

    @model_validator(mode="before")
    @classmethod
    def _go_fold_keys(cls, data: Any, info: ValidationInfo) -> Any:
        """Respell each key of a decoded object as the model's JSON key it folds to; going in
        order makes the last spelling win. Nested models run this too, with the same context."""
        if info.context is not _FROM_JSON or not isinstance(data, Mapping):
            return data  # built by field name, or not an object (the type error names it)
        keys = cls._go_keys
        out: dict[str, Any] = {}
        unknown: dict[str, Any] = {}
        for key, value in data.items():
            known = keys.get(key) or keys.get(fold(key))
            if known is None:
                unknown[key] = value
            else:
                out[known] = value
        if cls._go_keeps_unknown:
            out[EXTRA] = unknown
        return out


def decode(cls: type[M], raw: Mapping[str, Any]) -> M:
    """``cls`` from the decoded JSON object ``raw``, with Go's rules; :class:`SchemaError` naming
    the first bad key (in field order) otherwise."""
    try:
        return cls.model_validate(raw, context=_FROM_JSON)
    except ValidationError as exc:
        raise _schema_error(exc.errors(include_url=False)[0]) from exc


_EXPECTED: Final = {
    "bool_type": "a boolean",
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
}
"""Pydantic's strict type errors, in the JSON terms of our messages."""


def _schema_error(error: ErrorDetails) -> SchemaError:
    """One pydantic error as one line: the dotted key, then what was expected and what was
    given, or the text of the rule (a field validator's ``ValueError``) that refused it."""
    key = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"])
    key = key.removeprefix(".") or "(top level)"
    expected = _EXPECTED.get(error["type"])
    if expected is not None:
        return SchemaError(key, f"expected {expected}, got {_shown(error['input'])}")
    cause = error.get("ctx", {}).get("error")
    return SchemaError(key, str(cause) if isinstance(cause, ValueError) else error["msg"])


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
    if isinstance(value, str | int | float):
        return f"{_kind(value)} ({json.dumps(value)[:40]})"
    return _kind(value)


__all__ = ["EXTRA", "GoModel", "Int", "SchemaError", "decode"]
