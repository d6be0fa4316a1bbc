"""Protobuf request bodies as the JSON-shaped dicts the emulator stores.

kubectl's typed commands (``kubectl create namespace``, ...) and client-go programs send
built-in kinds as ``application/vnd.kubernetes.protobuf``: the ``k8s\\0`` magic and a
``runtime.Unknown`` (typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2, contentEncoding = 3,
contentType = 4) whose ``raw`` is the object's own message. The raw message is read with the
same tables the emulator encodes with (``podproto``, ``kindproto``), walked by the project's
one protobuf reader (``multusd.protobuf``'s field scanner, the daemon's too), so a field has one
description for both directions. Fields outside the tables are skipped, as a typed decode skips
unknown ones.

The result is what Go's JSON encoder would write for the typed object the body decodes to:
empty strings, and zeros of ``omitempty`` non-pointer fields (``INT0``/``BOOL0``), are left out,
because Go writes them on the protobuf wire but not in JSON; an empty ``Time`` is Go's zero time
and is left out too (JSON ``null``). ``Time`` keeps whole seconds, as ``metav1.Time`` does.

A body that cannot be decoded is a 400 worded like the API server's (``transformDecodeError`` in
``apiserver/pkg/endpoints/handlers/rest.go``): "the object provided is unrecognized (must be of
type Namespace): <error> (<hex of the first 30 bytes>)" when the envelope itself is broken, and
"Namespace in version "v1" cannot be handled as a Namespace: <error>" when the object inside is.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from multusd.kubesim.errors import ApiError, bad_request
from multusd.kubesim.kindproto import DELETE_OPTIONS, MESSAGES
from multusd.kubesim.podproto import (
    BOOL,
    BOOL0,
    BYTES,
    INLINE,
    INT,
    INT0,
    INTSTR,
    MAP,
    MICROTIME,
    MSG,
    MSGS,
    QMAP,
    STR,
    STRS,
    VARINT_KINDS,
    Table,
)
from multusd.protobuf import LEN, MAGIC, VARINT, envelope, scan, signed, tag, varint

Obj = dict[str, Any]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GO_ZERO_TIME = -62_135_596_800  # time.Time{}.Unix(): Go's zero time, JSON null
_TIMESTAMP = frozenset((tag(1, VARINT), tag(2, VARINT)))
_ENTRY = frozenset((tag(1, LEN), tag(2, LEN)))
_QUANTITY = frozenset((tag(1, LEN),))
_INT_OR_STRING = frozenset((tag(1, VARINT), tag(2, VARINT), tag(3, LEN)))


@dataclass(frozen=True, slots=True)
class _Index:
    """One table turned around: wire tag -> (JSON key, kind, sub-table)."""

    fields: dict[int, tuple[str, int, Any]]
    # The tags to ask the scanner for: the fields', plus each known field number with the other
    # wire type, so that a wrong wire type is an error (as in Go) instead of a silent skip.
    wanted: frozenset[int]


_indexes: dict[int, _Index] = {}  # by id(table): the tables are module constants, never freed


def _index(table: Table) -> _Index:
    found = _indexes.get(id(table))
    if found is None:
        fields: dict[int, tuple[str, int, Any]] = {}
        wrong: set[int] = set()
        for key, (number, kind, sub) in table.items():
            wire = VARINT if kind in VARINT_KINDS else LEN
            fields[tag(number, wire)] = (key, kind, sub)
            wrong.add(tag(number, LEN if wire == VARINT else VARINT))
        found = _indexes[id(table)] = _Index(fields, frozenset((*fields, *wrong)))
    return found


def _text(buf: bytes, a: int, b: int) -> str:
    # Go does not check UTF-8 when it unmarshals, and its JSON encoder writes U+FFFD for bad
    # bytes: "replace" ends where a Go server's JSON would.
    return buf[a:b].decode(errors="replace")


def _set(obj: Obj, key: str, value: Any) -> None:
    """The last occurrence of a field wins, and an unset one removes an earlier value."""
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = value


def _timestamp(buf: bytes, a: int, b: int, *, micro: bool) -> str | None:
    """``meta.Time``/``MicroTime`` {seconds = 1, nanos = 2} as its JSON text; None for Go's
    zero time (written as an empty message)."""
    seconds = nanos = 0
    for wire_tag, x, y in scan(buf, a, b, _TIMESTAMP):
        if wire_tag == tag(1, VARINT):
            seconds = signed(buf, x, y, 64)
        else:
            nanos = signed(buf, x, y, 32)
    if a == b or (seconds == _GO_ZERO_TIME and not nanos):
        return None
    try:
        moment = _EPOCH + timedelta(seconds=seconds, microseconds=nanos // 1000 if micro else 0)
    except OverflowError:
        raise ValueError(f"timestamp out of range: {seconds} s") from None
    text = moment.isoformat(timespec="microseconds" if micro else "seconds")
    return text.replace("+00:00", "Z")


def _entry(buf: bytes, a: int, b: int, kind: int) -> tuple[str, str]:
    """A map entry {key = 1, value = 2}; a QMAP's value is a ``resource.Quantity`` {string = 1}."""
    key = value = ""
    quantity = kind == QMAP
    for wire_tag, x, y in scan(buf, a, b, _ENTRY):
        if wire_tag == tag(1, LEN):
            key = _text(buf, x, y)
        elif quantity:
            for _, q1, q2 in scan(buf, x, y, _QUANTITY):
                value = _text(buf, q1, q2)
        else:
            value = _text(buf, x, y)
    return key, value or ("0" if quantity else "")


def _int_or_string(buf: bytes, a: int, b: int) -> int | str:
    """``intstr.IntOrString`` {type = 1, intVal = 2, strVal = 3}."""
    is_string = False
    number = 0
    text = ""
    for wire_tag, x, y in scan(buf, a, b, _INT_OR_STRING):
        if wire_tag == tag(1, VARINT):
            is_string = varint(buf, x, y)[0] == 1
        elif wire_tag == tag(2, VARINT):
            number = signed(buf, x, y, 32)
        else:
            text = _text(buf, x, y)
    return text if is_string else number


def _field_name(table: Table, number: int) -> str:
    return next((key or "(inline)" for key, (n, *_) in table.items() if n == number), "?")


def decode_message(buf: bytes, a: int, b: int, table: Table) -> Obj:
    """The JSON object of the message ``table`` describes in ``buf[a:b]`` (``ValueError`` on
    malformed input)."""
    index = _index(table)
    fields = index.fields
    obj: Obj = {}
    for wire_tag, x, y in scan(buf, a, b, index.wanted):
        field = fields.get(wire_tag)
        if field is None:
            name = _field_name(table, wire_tag >> 3)
            raise ValueError(f"proto: wrong wireType = {wire_tag & 7} for field {name}")
        key, kind, sub = field
        if kind == STR:
            _set(obj, key, _text(buf, x, y) if x != y else None)
        elif kind == MSG:
            obj[key] = decode_message(buf, x, y, sub)
        elif kind == MSGS:
            obj.setdefault(key, []).append(decode_message(buf, x, y, sub))
        elif kind in (INT, INT0):
            number = signed(buf, x, y, 64)
            _set(obj, key, number if number or kind == INT else None)
        elif kind in (BOOL, BOOL0):
            flag = varint(buf, x, y)[0] != 0
            _set(obj, key, flag if flag or kind == BOOL else None)
        elif kind == STRS:
            obj.setdefault(key, []).append(_text(buf, x, y))
        elif kind in (MAP, QMAP):
            name, value = _entry(buf, x, y, kind)
            obj.setdefault(key, {})[name] = value
        elif kind == INLINE:
            obj.update(decode_message(buf, x, y, sub))
        elif kind == INTSTR:
            obj[key] = _int_or_string(buf, x, y)
        elif kind == BYTES:
            _set(obj, key, base64.b64encode(buf[x:y]).decode("ascii") if x != y else None)
        else:  # TIME, MICROTIME
            _set(obj, key, _timestamp(buf, x, y, micro=kind == MICROTIME))
    return obj


def _go_error(exc: ValueError) -> str:
    """Our reader's errors in the words of Go's generated unmarshalers where they differ."""
    text = str(exc)
    if text.startswith("truncated"):
        return "unexpected EOF"
    if "longer than 10 bytes" in text:
        return "proto: integer overflow"
    return text


def _summary(body: bytes) -> str:
    """``summarizeData(body, 30)`` of the API server: the first 30 bytes, as text when they
    look like JSON, else in hex."""
    if not body:
        return "<empty>"
    head = body[:30].decode(errors="replace") if body[:1] == b"{" else body[:30].hex()
    return head + (" ..." if len(body) > 30 else "")


def _envelope(body: bytes) -> tuple[str, str, int, int]:
    """(apiVersion, kind, a, b) of a whole body; ``body[a:b]`` is the object's message."""
    if not body:
        raise ValueError("empty data")
    if not body.startswith(MAGIC):
        prefix = " ".join(str(byte) for byte in MAGIC)
        raise ValueError(
            f"provided data does not appear to be a protobuf message, expected prefix [{prefix}]"
        )
    if len(body) == len(MAGIC):
        raise ValueError("empty body")
    return envelope(body, 0, len(body))


def decode_object(body: bytes, api_version: str, kind: str) -> Obj:
    """A create or update body for the resource of ``api_version``/``kind``, as JSON would have
    carried it (``apiVersion`` and ``kind`` from the envelope, defaulted like Go does); an
    ``ApiError`` 400 when it cannot be decoded."""
    try:
        given_version, given_kind, a, b = _envelope(body)
    except ValueError as exc:
        raise bad_request(
            f"the object provided is unrecognized (must be of type {kind}): {_go_error(exc)} "
            f"({_summary(body)})"
        ) from exc
    actual_kind = given_kind or kind
    actual_version = given_version or api_version
    table = MESSAGES.get((actual_version, actual_kind))
    version = actual_version.rpartition("/")[2]
    if table is None:
        reason = f'no kind "{actual_kind}" is registered for version "{actual_version}"'
        raise _cannot_handle(actual_kind, version, kind, reason)
    try:
        obj = decode_message(body, a, b, table)
    except ValueError as exc:
        raise _cannot_handle(actual_kind, version, kind, _go_error(exc)) from exc
    return {"apiVersion": actual_version, "kind": actual_kind, **obj}


def _cannot_handle(given: str, version: str, kind: str, reason: str) -> ApiError:
    return bad_request(f'{given} in version "{version}" cannot be handled as a {kind}: {reason}')


def decode_delete_options(body: bytes) -> Obj:
    """A DELETE body (``meta.v1.DeleteOptions``). The API server answers any decoding error of
    these with its bare text."""
    try:
        _, kind, a, b = _envelope(body)
        if kind not in ("", "DeleteOptions"):
            raise bad_request("decoded object cannot be converted to DeleteOptions")
        return decode_message(body, a, b, DELETE_OPTIONS)
    except ValueError as exc:
        raise bad_request(_go_error(exc)) from exc
