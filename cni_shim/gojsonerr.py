"""Go ``encoding/json`` semantics for small, hand-decoded structs held as plain dicts.

Runtimes, logs and upstream tests see Go's decoder messages verbatim (``unexpected end of JSON
input``, ``json: cannot unmarshal string into Go struct field ShimNetConf.logToStderr of type
bool``). The skel checks, the shim config and the wire envelope each read a handful of typed
fields, so this module offers just that: a ``loads`` whose syntax errors are Go's (worded by
:mod:`cni_shim.godecode`, the package's one translation), case-insensitive field lookup with
the last match winning, and Go's type-mismatch texts. Invalid UTF-8 becomes U+FFFD and
``NaN``/``Infinity`` are rejected, as in Go. The daemon's libcni port reads whole documents the
same way, as ``interface{}`` sees them (:func:`loads_any`, :func:`loads_map`: integral numbers
without their fraction, maps sorted).
"""

from __future__ import annotations

from cni_shim import gojson
from cni_shim.errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MISSING: Any = object()
"""Returned by :func:`field` when the object has no such key."""


class GoJSONError(ValueError):
    """A decoding failure carrying Go's error text as its message."""


def loads(data: bytes | str) -> Any:
    """Parse ``data`` like ``json.Unmarshal`` into ``interface{}``; Go's wording on failure.

    Objects are plain dicts (a duplicate key keeps its first position and last value, which
    is all the field lookups below need). Syntax errors are worded by
    :func:`cni_shim.godecode.loads`, the package's one translation of Python's decoder errors
    into Go's, and only consulted on failure so the happy path is a plain ``json.loads``.
    """
    text = data.decode("utf-8", "replace") if isinstance(data, bytes | bytearray) else data
    try:
        return gojson.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, NaN/Infinity, nesting
        try:
            from cni_shim import godecode  # error path only: Go's wording

            godecode.loads(text.encode("utf-8", "surrogatepass"))
        except CNIError as go_err:
            raise GoJSONError(go_err.msg) from exc
        raise GoJSONError(str(exc)) from exc  # pragma: no cover - both parsers disagree


def _normalize(value: Any, *, sort: bool) -> Any:
    # Go decodes every number into float64 and prints integral values without a fraction
    # ("1.0" comes back as "1"), switching to exponent form only from 1e21 on. A Go map
    # re-marshals with sorted keys. Integers stay as written and an integral float becomes
    # its exact int: both differ from Go only beyond 2**53, where Go prints the float64's
    # shortest digits (cni_shim.gonum.float64_value); kept as the daemon has always had it.
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 1e21 else value
    if isinstance(value, list):
        return [_normalize(v, sort=sort) for v in value]
    if isinstance(value, dict):
        items = sorted(value.items()) if sort else value.items()
        return {k: _normalize(v, sort=sort) for k, v in items}
    return value


def loads_any(data: bytes | str) -> Any:
    """Decode JSON as Go's ``json.Unmarshal`` into ``interface{}`` would see it.

    Raises :class:`GoJSONError` (a ``ValueError``) with Go's wording.
    """
    return _normalize(loads(data), sort=False)


def loads_map(data: bytes | str) -> Any:
    """:func:`loads_any` with every object's keys sorted, as a Go ``map`` re-marshals them.

    Decoding into sorted dicts means a later ``gojson.dumps`` reproduces Go's bytes for the
    decoded parts, while values injected afterwards keep the order their producer chose (Go
    structs marshal in field order, not sorted).
    """
    return _normalize(loads(data), sort=True)


def type_name(value: Any) -> str:
    """The JSON kind Go names in ``UnmarshalTypeError`` (``string``, ``number``, ...)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def field_type_error(value: Any, struct: str, key: str, go_type: str) -> GoJSONError:
    """``json: cannot unmarshal <kind> into Go struct field <struct>.<key> of type <type>``."""
    return GoJSONError(
        f"json: cannot unmarshal {type_name(value)} into Go struct field {struct}.{key} "
        f"of type {go_type}"
    )


def value_type_error(value: Any, go_type: str) -> GoJSONError:
    """``json: cannot unmarshal <kind> into Go value of type <type>`` (top-level mismatch)."""
    return GoJSONError(f"json: cannot unmarshal {type_name(value)} into Go value of type {go_type}")


def field(obj: dict[str, Any], key: str) -> Any:
    """Look ``key`` up as Go fills a struct field: case-insensitive, the last match wins."""
    found: Any = MISSING
    folded = key.casefold()
    for name, value in obj.items():
        if name == key or name.casefold() == folded:
            found = value
    return found


def string_field(obj: dict[str, Any], key: str, struct: str) -> str:
    """A ``string`` struct field: absent or ``null`` gives ``""``; another kind is an error."""
    value = field(obj, key)
    if value is MISSING or value is None:
        return ""
    if not isinstance(value, str):
        raise field_type_error(value, struct, key, "string")
    return value


def bool_field(obj: dict[str, Any], key: str, struct: str) -> bool:
    """A ``bool`` struct field: absent or ``null`` gives ``False``; another kind is an error."""
    value = field(obj, key)
    if value is MISSING or value is None:
        return False
    if not isinstance(value, bool):
        raise field_type_error(value, struct, key, "bool")
    return value
