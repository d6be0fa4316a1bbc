"""The protobuf wire format, read by hand: the one protobuf reader of the project.

Every protobuf message anything here reads goes through ``scan``: Kubernetes pods, lists,
Statuses and watch events in the daemon (``multusd.k8s.kproto``), the kubelet's pod-resources
replies (``multusd.k8s.podresources``), the API emulator's protobuf request bodies
(``multusd.kubesim.protodecode``) and the CRI test rig's replies (``tests/e2e/cri/criapi.py``).
So a rule of the wire (varints, tags, groups, truncation, what is skipped) has one home, and
one set of error texts.

Why a module of its own at the top of the package: both the daemon (``multusd.k8s``) and the
emulator (``multusd.kubesim``) read with it, and import-linter keeps each of those two from
importing the other. Only reading is here: the daemon never writes protobuf, so the writers live
with the emulator, their one user in the product (``multusd.kubesim.protoencode``). Stdlib only.

The second half is what every Kubernetes protobuf body shares, read by the daemon's decoder and
the emulator's alike. Framing (apimachinery ``runtime/serializer/protobuf``): a body is the magic
``k8s\\0`` and then a ``runtime.Unknown`` whose ``raw`` is the object's own message. A watch
stream (``application/vnd.kubernetes.protobuf;stream=watch``) is a sequence of frames, each a
4-byte big-endian length and a bare ``metav1.WatchEvent`` whose ``object.raw`` is again magic,
``Unknown`` and object::

    runtime.Unknown      { TypeMeta typeMeta = 1; bytes raw = 2;
                           string contentEncoding = 3; string contentType = 4; }
    runtime.TypeMeta     { string apiVersion = 1; string kind = 2; }

Malformed or truncated input raises ``ValueError``.
"""

from __future__ import annotations

import struct

__all__ = [
    "END_GROUP",
    "FIXED32",
    "FIXED64",
    "FRAME_LEN",
    "LEN",
    "MAGIC",
    "MEDIA_TYPE",
    "START_GROUP",
    "STREAM_MEDIA_TYPE",
    "VARINT",
    "Buf",
    "envelope",
    "map_entry",
    "scan",
    "signed",
    "tag",
    "text",
    "unwrap",
    "varint",
]

# The wire types.
VARINT, FIXED64, LEN, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5


# --- reading -------------------------------------------------------------------------------
#
# One loop, ``scan``, walks a message and returns only the fields asked for, by their tag
# (``number << 3 | wire type``): skipping what we don't read is the whole point, and doing it
# in one Python frame per message (no generator, no call per field) is what keeps it fast.
# Positions are offsets into the one body buffer, so nested messages are never copied.

Buf = bytes | bytearray


def varint(buf: Buf, pos: int, end: int) -> tuple[int, int]:
    """``(value, position after it)`` of the varint at ``buf[pos]``, read no further than
    ``end``."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ValueError("truncated protobuf varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("protobuf varint longer than 10 bytes")


def tag(number: int, wire: int) -> int:
    """The key of a field on the wire: what ``scan`` is asked for and returns."""
    return number << 3 | wire


def scan(buf: Buf, pos: int, end: int, wanted: frozenset[int]) -> list[tuple[int, int, int]]:
    """``(tag, a, b)`` of each field of ``buf[pos:end]`` whose tag is in ``wanted``, in wire
    order: ``buf[a:b]`` is a length-delimited payload or a varint's bytes. Everything else,
    whatever its wire type, is skipped; malformed input raises ``ValueError``."""
    found: list[tuple[int, int, int]] = []
    try:
        while pos < end:
            key = buf[pos]
            pos += 1
            if key >= 0x80:
                more = buf[pos]
                if more < 0x80:  # two-byte tags (fields 16-2047) are common: inline them
                    key = (key & 0x7F) | more << 7
                    pos += 1
                else:
                    key, pos = varint(buf, pos - 1, end)
            wire = key & 7
            if key < 8:
                raise ValueError("protobuf field number 0")
            if wire == LEN:
                size = buf[pos]
                pos += 1
                if size >= 0x80:
                    more = buf[pos]
                    if more < 0x80:  # lengths of 128 B-16 KiB, inlined likewise
                        size = (size & 0x7F) | more << 7
                        pos += 1
                    else:
                        size, pos = varint(buf, pos - 1, end)
                stop = pos + size
                if key in wanted:
                    found.append((key, pos, stop))
                pos = stop
            elif wire == VARINT:
                start = pos
                while buf[pos] >= 0x80:
                    pos += 1
                pos += 1
                if pos - start > 10:
                    raise ValueError("protobuf varint longer than 10 bytes")
                if key in wanted:
                    found.append((key, start, pos))
            elif wire == FIXED64:
                pos += 8
            elif wire == FIXED32:
                pos += 4
            elif wire == START_GROUP:
                pos = _skip_group(buf, pos, end, key >> 3)
            else:
                raise ValueError(f"unexpected protobuf wire type {wire}")
    except IndexError:
        raise ValueError("truncated protobuf message") from None
    if pos != end:
        raise ValueError("truncated protobuf message")
    return found


def _skip_group(buf: Buf, pos: int, end: int, number: int) -> int:
    """Skip a (deprecated) group up to its matching END_GROUP; returns the position after."""
    while True:
        if pos >= end:
            raise ValueError("truncated protobuf group")
        key, pos = varint(buf, pos, end)
        wire = key & 7
        if wire == END_GROUP:
            if key >> 3 != number:
                raise ValueError("mismatched protobuf end group")
            return pos
        if wire == VARINT:
            pos = varint(buf, pos, end)[1]
        elif wire == FIXED64:
            pos += 8
        elif wire == FIXED32:
            pos += 4
        elif wire == LEN:
            size, pos = varint(buf, pos, end)
            pos += size
        elif wire == START_GROUP:
            pos = _skip_group(buf, pos, end, key >> 3)
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        if pos > end:
            raise ValueError("truncated protobuf group")


def text(buf: Buf, a: int, b: int) -> str:
    """A string field's payload; invalid UTF-8 is malformed input, as protobuf's own decoders
    have it."""
    try:
        return buf[a:b].decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid UTF-8 in a protobuf string: {exc}") from exc


def signed(buf: Buf, a: int, b: int, bits: int) -> int:
    """A varint field's value as a signed int32/int64 (negatives arrive sign-extended)."""
    value = varint(buf, a, b)[0] & ((1 << bits) - 1)
    return value - (1 << bits) if value >> (bits - 1) else value


_T_KEY = tag(1, LEN)
_T_VALUE = tag(2, LEN)
_MAP_ENTRY = frozenset((_T_KEY, _T_VALUE))


def map_entry(buf: Buf, a: int, b: int) -> tuple[str, str]:
    """``(key, value)`` of one entry of a ``map<string, string>`` (a message {key = 1,
    value = 2}; either may be missing, and come in any order)."""
    key = value = ""
    # Fast path: Go writes a string map entry as key (0x0a, short length) then value
    # (0x12, a length of one or two bytes); anything else takes the general path.
    if b - a >= 4 and buf[a] == _T_KEY and buf[a + 1] < 0x80:
        key_end = a + 2 + buf[a + 1]
        if key_end + 2 <= b and buf[key_end] == _T_VALUE:
            size = buf[key_end + 1]
            start = key_end + 2
            if size >= 0x80:
                more = buf[start] if start < b else 0x80
                size = (size & 0x7F) | more << 7 if more < 0x80 else b  # b: never matches
                start += 1
            if start + size == b:
                return text(buf, a + 2, key_end), text(buf, start, b)
    for field, x, y in scan(buf, a, b, _MAP_ENTRY):
        if field == _T_KEY:
            key = text(buf, x, y)
        else:
            value = text(buf, x, y)
    return key, value


# --- Kubernetes' envelope and watch framing ----------------------------------------------

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
STREAM_MEDIA_TYPE = MEDIA_TYPE + ";stream=watch"
FRAME_LEN = struct.Struct(">I")  # the length in front of each frame of a watch stream

_UNKNOWN = frozenset((tag(1, LEN), tag(2, LEN), tag(3, LEN)))
_TYPE_META = frozenset((tag(1, LEN), tag(2, LEN)))


def envelope(body: Buf, start: int, end: int) -> tuple[str, str, int, int]:
    """``(apiVersion, kind, a, b)`` of the magic-prefixed ``runtime.Unknown`` in
    ``body[start:end]``; ``body[a:b]`` is the object's own message."""
    if body[start : start + 4] != MAGIC:
        raise ValueError("not a Kubernetes protobuf object (no k8s\\0 magic)")
    api_version = kind = ""
    raw = (start, start)
    for field, a, b in scan(body, start + 4, end, _UNKNOWN):
        if field == tag(1, LEN):
            for field2, x, y in scan(body, a, b, _TYPE_META):
                if field2 == tag(1, LEN):
                    api_version = text(body, x, y)
                else:
                    kind = text(body, x, y)
        elif field == tag(2, LEN):
            raw = (a, b)
        elif a != b:
            raise ValueError(f"unsupported content encoding {text(body, a, b)!r}")
    return api_version, kind, raw[0], raw[1]


def unwrap(body: bytes) -> tuple[str, str, bytes]:
    """``(apiVersion, kind, raw)`` of a magic-prefixed ``runtime.Unknown``."""
    api_version, kind, a, b = envelope(body, 0, len(body))
    return api_version, kind, body[a:b]
