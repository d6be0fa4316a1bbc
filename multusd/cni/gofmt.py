"""Go formatting and JSON-decoding behaviour that leaks into libcni's error texts and bytes.

libcni's messages embed Go-formatted values (``%q`` strings, ``%s`` slices, ``exec.ExitError``
texts, ``encoding/json`` error texts), and its re-encoded configs carry Go's number handling
(every JSON number passes through ``float64``). Users and upstream tests compare these as text,
so the few Go rules we depend on live here, once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Any

from cni_shim import gojsonerr
from cni_shim.goquote import go_quote

quote = go_quote
"""Go's ``%q`` (``strconv.Quote``); invalid UTF-8 bytes become ``\\xNN``."""


def slice_str(items: Sequence[str]) -> str:
    """Go's ``%s``/``%v`` of a ``[]string``: ``[a b c]``."""
    return "[" + " ".join(items) + "]"


def errno_text(errno: int | None) -> str:
    """Go's ``syscall.Errno.Error()``: the C text with a lower-case first letter."""
    if errno is None:
        return "unknown error"
    text = os.strerror(errno)
    return text[:1].lower() + text[1:]


def exit_text(returncode: int) -> str:
    """Go's ``exec.ExitError`` text: ``exit status 1``, ``signal: killed``."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        name = signal.strsignal(-returncode) or f"signal {-returncode}"
    except ValueError:
        name = f"signal {-returncode}"
    return "signal: " + name[:1].lower() + name[1:]


def _normalize(value: Any, *, sort: bool) -> Any:
    # Go decodes every number into float64 and prints integral values without a fraction
    # ("1.0" comes back as "1"), switching to exponent form only from 1e21 on. A Go map
    # re-marshals with sorted keys.
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 1e21 else value
    if isinstance(value, list):
        return [_normalize(v, sort=sort) for v in value]
    if isinstance(value, dict):
        items = sorted(value.items()) if sort else value.items()
        return {k: _normalize(v, sort=sort) for k, v in items}
    return value


def loads(data: bytes | str) -> Any:
    """Decode JSON as Go's ``json.Unmarshal`` into ``interface{}`` would see it.

    Raises :class:`cni_shim.gojsonerr.GoJSONError` (a ``ValueError``) with Go's wording.
    """
    return _normalize(gojsonerr.loads(data), sort=False)


def loads_map(data: bytes | str) -> Any:
    """:func:`loads` with every object's keys sorted, as a Go ``map`` re-marshals them.

    Decoding into sorted dicts means a later ``gojson.dumps`` reproduces Go's bytes for the
    decoded parts, while values injected afterwards keep the order their producer chose (Go
    structs marshal in field order, not sorted).
    """
    return _normalize(gojsonerr.loads(data), sort=True)


def json_error_text(exc: ValueError) -> str:
    """The Go text of a decoding error raised by :func:`loads` or by our own type checks."""
    return str(exc)


json_type_name = gojsonerr.type_name


def type_name(value: Any) -> str:
    """Go's ``%T`` of a value decoded into ``interface{}``."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    return "map[string]interface {}"
