"""JSON that matches Go's ``encoding/json`` byte for byte, and starts in microseconds.

Two jobs, both for the shim's start-up budget and for byte fidelity:

* **Speed.** ``import json`` costs ~9 ms here (it pulls in ``re``, ``enum``, ``functools``),
  more than the whole interpreter start. The C accelerator ``_json`` that ``json`` itself uses
  needs none of that, so we drive it directly. Only error paths import ``json.decoder`` (the C
  scanner does so itself to build a ``JSONDecodeError``).
* **Fidelity.** Go escapes ``<``, ``>`` and ``&`` (and U+2028/U+2029) inside strings, writes
  non-ASCII text as UTF-8 rather than ``\\uXXXX``, rejects ``NaN``/``Infinity``, and
  ``MarshalIndent`` puts no trailing newline after the document. Key order is the caller's
  business: Go structs keep field order (build the dict in that order), Go maps are sorted
  (pass ``sort_keys=True``).
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)
_WHITESPACE = " \t\n\r"


class ConstantError(ValueError):
    """``NaN`` or ``Infinity`` in a document: Go's words for it as the message."""


def reject_constant(name: str) -> Any:
    """The ``parse_constant`` hook that refuses what Go refuses, in Go's words.

    Python's scanner accepts ``NaN``, ``Infinity`` and ``-Infinity`` (the only names it passes
    here); Go's stops at their first letter. The one copy of this rule: every decoder of the
    package and the daemon's use it (``loads`` by default).
    """
    if name.startswith("-"):
        raise ConstantError("invalid character 'I' in numeric literal")
    raise ConstantError(f"invalid character '{name[0]}' looking for beginning of value")


class _ScanContext:
    """The attributes ``_json.make_scanner`` reads from a ``JSONDecoder``."""

    __slots__ = (
        "object_hook",
        "object_pairs_hook",
        "parse_constant",
        "parse_float",
        "parse_int",
        "strict",
    )

    def __init__(
        self,
        object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None,
        parse_float: Callable[[str], Any] | None,
        parse_constant: Callable[[str], Any] | None,
    ) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = object_pairs_hook
        self.parse_float = parse_float or float
        self.parse_int = int
        self.parse_constant = parse_constant or reject_constant


_default_scanner = _json.make_scanner(_ScanContext(None, None, None))  # type: ignore[arg-type]


def _decode_error(msg: str, doc: str, pos: int) -> ValueError:
    from json.decoder import JSONDecodeError

    return JSONDecodeError(msg, doc, pos)


def loads(
    data: str | bytes,
    *,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
    parse_float: Callable[[str], Any] | None = None,
    parse_constant: Callable[[str], Any] | None = None,
) -> Any:
    """``json.loads`` semantics (raises ``json.JSONDecodeError``), without importing ``json``.

    ``NaN`` and ``Infinity`` are rejected as in Go (:func:`reject_constant`, a ``ValueError``)
    unless ``parse_constant`` accepts them.
    """
    text = data.decode("utf-8", "replace") if isinstance(data, bytes | bytearray) else data
    if object_pairs_hook is None and parse_float is None and parse_constant is None:
        scanner = _default_scanner
    else:
        context = _ScanContext(object_pairs_hook, parse_float, parse_constant)
        scanner = _json.make_scanner(context)  # type: ignore[arg-type]
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        try:
            obj, end = scanner(text, start)
        except SystemError:
            # CPython 3.11's C scanner raises its syntax errors as ``json.decoder``'s
            # JSONDecodeError, which it finds in ``sys.modules`` only: with ``json`` never
            # imported (the shim, under ``-I -S``) it fails with "returned NULL without
            # setting an exception". Import it and scan again, on the error path only.
            import json.decoder  # noqa: F401

            obj, end = scanner(text, start)
    except StopIteration as stop:
        raise _decode_error("Expecting value", text, stop.value) from None
    tail = text[end:]
    end += len(tail) - len(tail.lstrip(_WHITESPACE))
    if end != len(text):
        raise _decode_error("Extra data", text, end)
    return obj


def _encoder(sort_keys: bool) -> Callable[[Any, int], list[str]]:
    return _json.make_encoder(
        None, _unencodable, _json.encode_basestring, None, ":", ",", sort_keys, False, False
    )


def _unencodable(obj: object) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


_COMPACT = _encoder(False)
_COMPACT_SORTED = _encoder(True)


def _plain(obj: Any, sort_keys: bool) -> str:
    return "".join((_COMPACT_SORTED if sort_keys else _COMPACT)(obj, 0))


def dumps(obj: Any, *, sort_keys: bool = False) -> str:
    """Compact encoding, as ``json.Marshal``.

    The escape table is applied to the whole document: those characters can only occur inside
    JSON strings, so this is equivalent to escaping each string.
    """
    return _plain(obj, sort_keys).translate(_GO_ESCAPES)


def _indented(obj: Any, level: int, sort_keys: bool, out: list[str]) -> None:
    if isinstance(obj, dict) and obj:
        pad = "\n" + "    " * (level + 1)
        items = sorted(obj.items()) if sort_keys else obj.items()
        out.append("{")
        for index, (key, value) in enumerate(items):
            out.append(("," if index else "") + pad + _json.encode_basestring(str(key)) + ": ")
            _indented(value, level + 1, sort_keys, out)
        out.append("\n" + "    " * level + "}")
    elif isinstance(obj, list | tuple) and obj:
        pad = "\n" + "    " * (level + 1)
        out.append("[")
        for index, value in enumerate(obj):
            out.append(("," if index else "") + pad)
            _indented(value, level + 1, sort_keys, out)
        out.append("\n" + "    " * level + "]")
    else:
        out.append(_plain(obj, sort_keys))


def dumps_indent(obj: Any, *, sort_keys: bool = False) -> str:
    """Four-space indented encoding, as ``json.MarshalIndent(v, "", "    ")``."""
    out: list[str] = []
    _indented(obj, 0, sort_keys, out)
    return "".join(out).translate(_GO_ESCAPES)
