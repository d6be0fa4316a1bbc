"""Kubernetes' protobuf wire format for pods, by hand: no protobuf runtime, no generated code.

Why by hand: the daemon reads six fields of a pod, and no maintained package ships compiled
``k8s.io/api`` messages (python-stack §2). A schema of only those six fields also trims for
free: everything else is skipped on the wire without being built, which is what makes this
several times cheaper than ``json.loads`` followed by ``trim_pod``.

Framing (apimachinery ``runtime/serializer/protobuf``): a body is the magic ``k8s\\0`` and then
a ``runtime.Unknown`` whose ``raw`` is the object's own message. A watch stream
(``application/vnd.kubernetes.protobuf;stream=watch``) is a sequence of frames, each a 4-byte
big-endian length and a bare ``metav1.WatchEvent`` whose ``object.raw`` is again magic,
``Unknown`` and object.

The schema this module reads and writes (field numbers from ``k8s.io/api`` core/v1 and
``k8s.io/apimachinery`` meta/v1 and runtime ``generated.proto``; ``*`` = decoded, the rest is
only written by the encoders here, which the tests use; the emulator writes complete pods with
``multusd.kubesim.podproto`` and uses the framing, list and Status encoders from here)::

    runtime.Unknown      { TypeMeta typeMeta = 1*; bytes raw = 2*;
                           string contentEncoding = 3; string contentType = 4; }
    runtime.TypeMeta     { string apiVersion = 1*; string kind = 2*; }
    runtime.RawExtension { bytes raw = 1*; }
    meta.WatchEvent      { string type = 1*; RawExtension object = 2*; }
    meta.ListMeta        { string resourceVersion = 2*; string continue = 3*;
                           int64 remainingItemCount = 4*; }
    meta.ObjectMeta      { string name = 1*; string generateName = 2; string namespace = 3*;
                           string uid = 5*; string resourceVersion = 6*; int64 generation = 7;
                           Time creationTimestamp = 8; Time deletionTimestamp = 9;
                           int64 deletionGracePeriodSeconds = 10;
                           map<string,string> labels = 11; map<string,string> annotations = 12*;
                           repeated string finalizers = 14; }
    meta.Time            { int64 seconds = 1; int32 nanos = 2; }
    meta.Status          { ListMeta metadata = 1; string status = 2*; string message = 3*;
                           string reason = 4*; StatusDetails details = 5*; int32 code = 6*; }
    meta.StatusDetails   { string name = 1*; string group = 2*; string kind = 3*;
                           string uid = 6*; int32 retryAfterSeconds = 5*; }
    core.Pod             { ObjectMeta metadata = 1*; PodSpec spec = 2*; PodStatus status = 3; }
    core.PodList         { ListMeta metadata = 1*; repeated Pod items = 2*; }
    core.PodSpec         { repeated Container containers = 2; string restartPolicy = 3;
                           string serviceAccountName = 8; string nodeName = 10*;
                           string schedulerName = 19; }
    core.Container       { string name = 1; string image = 2; }
    core.PodStatus       { string phase = 1; string hostIP = 5; string podIP = 6; }

Decoded pods are exactly ``multusd.k8s.store.trim_pod`` of the JSON form: Go writes empty
strings on the protobuf wire where JSON's ``omitempty`` leaves them out, so empty values are
dropped here. Malformed or truncated input raises ``ValueError``. Stdlib only: imported by both
the client (``multusd.k8s``) and the emulator (``multusd.kubesim``).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
STREAM_MEDIA_TYPE = MEDIA_TYPE + ";stream=watch"
MAX_FRAME = 64 << 20  # a frame longer than this is corruption, not a pod (etcd caps ~1.5 MiB)

Obj = dict[str, Any]

_VARINT, _FIXED64, _LEN, _START_GROUP, _END_GROUP, _FIXED32 = 0, 1, 2, 3, 4, 5
_FRAME_LEN = struct.Struct(">I")


# --- reading -------------------------------------------------------------------------------
#
# One loop, ``_scan``, walks a message and returns only the fields asked for, by their tag
# (``number << 3 | wire type``): skipping what we don't read is the whole point, and doing it
# in one Python frame per message (no generator, no call per field) is what keeps it fast.
# Positions are offsets into the one body buffer, so nested messages are never copied.

Buf = bytes | bytearray


def _varint(buf: Buf, pos: int, end: int) -> tuple[int, int]:
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


def _tag(number: int, wire: int) -> int:
    return number << 3 | wire


def _scan(buf: Buf, pos: int, end: int, wanted: frozenset[int]) -> list[tuple[int, int, int]]:
    """``(tag, a, b)`` of each field of ``buf[pos:end]`` whose tag is in ``wanted``, in wire
    order: ``buf[a:b]`` is a length-delimited payload or a varint's bytes. Everything else,
    whatever its wire type, is skipped; malformed input raises ``ValueError``."""
    found: list[tuple[int, int, int]] = []
    try:
        while pos < end:
            tag = buf[pos]
            pos += 1
            if tag >= 0x80:
                more = buf[pos]
                if more < 0x80:  # two-byte tags (fields 16-2047) are common: inline them
                    tag = (tag & 0x7F) | more << 7
                    pos += 1
                else:
                    tag, pos = _varint(buf, pos - 1, end)
            wire = tag & 7
            if tag < 8:
                raise ValueError("protobuf field number 0")
            if wire == _LEN:
                size = buf[pos]
                pos += 1
                if size >= 0x80:
                    more = buf[pos]
                    if more < 0x80:  # lengths of 128 B-16 KiB, inlined likewise
                        size = (size & 0x7F) | more << 7
                        pos += 1
                    else:
                        size, pos = _varint(buf, pos - 1, end)
                stop = pos + size
                if tag in wanted:
                    found.append((tag, pos, stop))
                pos = stop
            elif wire == _VARINT:
                start = pos
                while buf[pos] >= 0x80:
                    pos += 1
                pos += 1
                if pos - start > 10:
                    raise ValueError("protobuf varint longer than 10 bytes")
                if tag in wanted:
                    found.append((tag, start, pos))
            elif wire == _FIXED64:
                pos += 8
            elif wire == _FIXED32:
                pos += 4
            elif wire == _START_GROUP:
                pos = _skip_group(buf, pos, end, tag >> 3)
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
        key, pos = _varint(buf, pos, end)
        wire = key & 7
        if wire == _END_GROUP:
            if key >> 3 != number:
                raise ValueError("mismatched protobuf end group")
            return pos
        if wire == _VARINT:
            pos = _varint(buf, pos, end)[1]
        elif wire == _FIXED64:
            pos += 8
        elif wire == _FIXED32:
            pos += 4
        elif wire == _LEN:
            size, pos = _varint(buf, pos, end)
            pos += size
        elif wire == _START_GROUP:
            pos = _skip_group(buf, pos, end, key >> 3)
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        if pos > end:
            raise ValueError("truncated protobuf group")


def _str(buf: Buf, a: int, b: int) -> str:
    try:
        return buf[a:b].decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid UTF-8 in a protobuf string: {exc}") from exc


def _int(buf: Buf, a: int, b: int, bits: int) -> int:
    """A varint field's value as a signed int32/int64 (negatives arrive sign-extended)."""
    value = _varint(buf, a, b)[0] & ((1 << bits) - 1)
    return value - (1 << bits) if value >> (bits - 1) else value


_T_KEY = _tag(1, _LEN)
_T_VALUE = _tag(2, _LEN)
_MAP_ENTRY = frozenset((_T_KEY, _T_VALUE))


def _map_entry(buf: Buf, a: int, b: int) -> tuple[str, str]:
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
                return _str(buf, a + 2, key_end), _str(buf, start, b)
    for tag, x, y in _scan(buf, a, b, _MAP_ENTRY):
        if tag == _T_KEY:
            key = _str(buf, x, y)
        else:
            value = _str(buf, x, y)
    return key, value


_UNKNOWN = frozenset((_tag(1, _LEN), _tag(2, _LEN), _tag(3, _LEN)))
_TYPE_META = frozenset((_tag(1, _LEN), _tag(2, _LEN)))


def _unwrap(body: Buf, start: int, end: int) -> tuple[str, str, int, int]:
    """``(apiVersion, kind, a, b)`` of the magic-prefixed ``runtime.Unknown`` in
    ``body[start:end]``; ``body[a:b]`` is the object's own message."""
    if body[start : start + 4] != MAGIC:
        raise ValueError("not a Kubernetes protobuf object (no k8s\\0 magic)")
    api_version = kind = ""
    raw = (start, start)
    for tag, a, b in _scan(body, start + 4, end, _UNKNOWN):
        if tag == _tag(1, _LEN):
            for tag2, x, y in _scan(body, a, b, _TYPE_META):
                if tag2 == _tag(1, _LEN):
                    api_version = _str(body, x, y)
                else:
                    kind = _str(body, x, y)
        elif tag == _tag(2, _LEN):
            raw = (a, b)
        elif a != b:
            raise ValueError(f"unsupported content encoding {_str(body, a, b)!r}")
    return api_version, kind, raw[0], raw[1]


def unwrap(body: bytes) -> tuple[str, str, bytes]:
    """``(apiVersion, kind, raw)`` of a magic-prefixed ``runtime.Unknown``."""
    api_version, kind, a, b = _unwrap(body, 0, len(body))
    return api_version, kind, body[a:b]


_META_STRINGS = {
    _tag(1, _LEN): "name",
    _tag(3, _LEN): "namespace",
    _tag(5, _LEN): "uid",
    _tag(6, _LEN): "resourceVersion",
}
_T_ANNOTATIONS = _tag(12, _LEN)
_OBJECT_META = frozenset((*_META_STRINGS, _T_ANNOTATIONS))
_T_METADATA = _tag(1, _LEN)
_T_SPEC = _tag(2, _LEN)
_POD = frozenset((_T_METADATA, _T_SPEC))
_T_NODE_NAME = _tag(10, _LEN)
_POD_SPEC = frozenset((_T_NODE_NAME,))


def _object_meta(buf: Buf, a: int, b: int) -> Obj:
    meta: Obj = {}
    annotations: dict[str, str] = {}
    names = _META_STRINGS
    intern = sys.intern
    for tag, x, y in _scan(buf, a, b, _OBJECT_META):
        if tag == _T_ANNOTATIONS:
            key, value = _map_entry(buf, x, y)
            annotations[intern(key)] = value
        elif x != y:
            meta[names[tag]] = _str(buf, x, y)
        else:
            meta.pop(names[tag], None)
    if annotations:
        meta["annotations"] = annotations
    return meta


def _pod(buf: Buf, a: int, b: int) -> Obj:
    meta: Obj = {}
    node = ""
    for tag, x, y in _scan(buf, a, b, _POD):
        if tag == _T_METADATA:
            meta = _object_meta(buf, x, y)
        else:
            for _, n1, n2 in _scan(buf, x, y, _POD_SPEC):
                node = _str(buf, n1, n2)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
    }


def pod_from_message(buf: bytes, a: int = 0, b: int | None = None) -> Obj:
    """A trimmed pod from a bare ``core.v1.Pod`` message (a list item) in ``buf[a:b]``."""
    return _pod(buf, a, len(buf) if b is None else b)


def _expect(kind: str, wanted: str) -> None:
    if kind and kind != wanted:
        raise ValueError(f"expected a {wanted}, got a {kind}")


def decode_pod(raw: bytes) -> Obj:
    """A trimmed pod (``trim_pod``'s shape) from a whole protobuf body (magic + Unknown)."""
    _, kind, a, b = _unwrap(raw, 0, len(raw))
    _expect(kind, "Pod")
    return _pod(raw, a, b)


_LIST_META = frozenset((_tag(2, _LEN), _tag(3, _LEN), _tag(4, _VARINT)))


def _list_meta(buf: Buf, a: int, b: int) -> Obj:
    meta: Obj = {}
    for tag, x, y in _scan(buf, a, b, _LIST_META):
        if tag == _tag(4, _VARINT):
            meta["remainingItemCount"] = _int(buf, x, y, 64)
        elif x != y:
            meta["resourceVersion" if tag == _tag(2, _LEN) else "continue"] = _str(buf, x, y)
    return meta


_POD_LIST = frozenset((_T_METADATA, _tag(2, _LEN)))


def _pod_list(buf: Buf, a: int, b: int) -> tuple[list[Obj], Obj]:
    items: list[Obj] = []
    meta: Obj = {}
    for tag, x, y in _scan(buf, a, b, _POD_LIST):
        if tag == _T_METADATA:
            meta = _list_meta(buf, x, y)
        else:
            items.append(_pod(buf, x, y))
    return items, meta


def decode_pod_list(body: bytes) -> tuple[list[Obj], str, str]:
    """``(trimmed pods, resourceVersion, continue)`` of a whole ``PodList`` body."""
    _, kind, a, b = _unwrap(body, 0, len(body))
    _expect(kind, "PodList")
    items, meta = _pod_list(body, a, b)
    return items, meta.get("resourceVersion", ""), meta.get("continue", "")


_STATUS_STRINGS = {_tag(2, _LEN): "status", _tag(3, _LEN): "message", _tag(4, _LEN): "reason"}
_T_DETAILS = _tag(5, _LEN)
_T_CODE = _tag(6, _VARINT)
_STATUS = frozenset((*_STATUS_STRINGS, _T_DETAILS, _T_CODE))
_DETAIL_STRINGS = {1: "name", 2: "group", 3: "kind", 6: "uid"}
_DETAIL_TAGS = {_tag(n, _LEN): name for n, name in _DETAIL_STRINGS.items()}
_T_RETRY_AFTER = _tag(5, _VARINT)
_STATUS_DETAILS = frozenset((*_DETAIL_TAGS, _T_RETRY_AFTER))


def _status(buf: Buf, a: int, b: int) -> Obj:
    status: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    for tag, x, y in _scan(buf, a, b, _STATUS):
        if tag == _T_CODE:
            status["code"] = _int(buf, x, y, 32)
        elif tag == _T_DETAILS:
            status["details"] = _status_details(buf, x, y)
        elif x != y:
            status[_STATUS_STRINGS[tag]] = _str(buf, x, y)
    return status


def _status_details(buf: Buf, a: int, b: int) -> Obj:
    details: Obj = {}
    for tag, x, y in _scan(buf, a, b, _STATUS_DETAILS):
        if tag == _T_RETRY_AFTER:
            details["retryAfterSeconds"] = _int(buf, x, y, 32)
        elif x != y:
            details[_DETAIL_TAGS[tag]] = _str(buf, x, y)
    return details


def decode_status(body: bytes) -> Obj:
    """A ``metav1.Status`` (code, reason, message, details) as the JSON form's dict."""
    _, kind, a, b = _unwrap(body, 0, len(body))
    _expect(kind, "Status")
    return _status(body, a, b)


def _decode(body: Buf, start: int, end: int) -> Obj:
    api_version, kind, a, b = _unwrap(body, start, end)
    if kind == "Pod":
        return _pod(body, a, b)
    if kind == "PodList":
        items, meta = _pod_list(body, a, b)
        return {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}
    if kind == "Status":
        return _status(body, a, b)
    raise ValueError(f"no protobuf schema for {api_version or '?'} {kind or '?'}")


def decode(body: bytes) -> Obj:
    """Any body this module knows, by its envelope's kind: a trimmed ``Pod``, a ``PodList``
    shaped like the JSON one (``metadata``, trimmed ``items``), or a ``Status``."""
    return _decode(body, 0, len(body))


_WATCH_EVENT = frozenset((_tag(1, _LEN), _tag(2, _LEN)))
_RAW_EXTENSION = frozenset((_tag(1, _LEN),))


def _watch_event(buf: Buf, a: int, b: int) -> Obj:
    event_type = ""
    obj: Obj | None = None
    for tag, x, y in _scan(buf, a, b, _WATCH_EVENT):
        if tag == _tag(1, _LEN):
            event_type = _str(buf, x, y)
        else:
            raw = (x, x)
            for _, r1, r2 in _scan(buf, x, y, _RAW_EXTENSION):
                raw = (r1, r2)
            obj = _decode(buf, *raw)
    if not event_type or obj is None:
        raise ValueError("protobuf watch event without a type or an object")
    return {"type": event_type, "object": obj}


class WatchFrameReader:
    """Incremental reader of a protobuf watch stream: ``feed`` any chunk, get the events that
    became complete. ERROR events carry the decoded ``Status`` as their object."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[Obj]:
        buf = self._buffer
        buf += chunk
        events: list[Obj] = []
        pos = 0
        have = len(buf)
        while have - pos >= 4:
            (size,) = _FRAME_LEN.unpack_from(buf, pos)
            if size > MAX_FRAME:
                raise ValueError(f"protobuf watch frame of {size} bytes")
            if have - pos - 4 < size:
                break
            events.append(_watch_event(buf, pos + 4, pos + 4 + size))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return events

    def close(self) -> None:
        """The stream ended: a partial frame left over is a truncated stream."""
        if self._buffer:
            raise ValueError(f"protobuf watch stream ended inside a frame ({len(self._buffer)} B)")


def iter_watch_frames(chunks: Iterable[bytes]) -> Iterator[Obj]:
    """Events ``{"type", "object"}`` from the chunks of a watch stream, split anywhere."""
    reader = WatchFrameReader()
    for chunk in chunks:
        yield from reader.feed(chunk)
    reader.close()


# --- writing -------------------------------------------------------------------------------


def put_varint(out: bytearray, value: int) -> None:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int32/int64 go out as 10-byte two's complement
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def put_bytes(out: bytearray, number: int, data: bytes) -> None:
    put_varint(out, number << 3 | _LEN)
    put_varint(out, len(data))
    out += data


def put_str(out: bytearray, number: int, value: Any) -> None:
    if isinstance(value, str) and value:
        put_bytes(out, number, value.encode())


def put_int(out: bytearray, number: int, value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        put_varint(out, number << 3 | _VARINT)
        put_varint(out, value)


def put_map(out: bytearray, number: int, mapping: Any) -> None:
    if not isinstance(mapping, Mapping):
        return
    for key, value in mapping.items():
        entry = bytearray()
        put_bytes(entry, 1, str(key).encode())
        put_bytes(entry, 2, str(value).encode())
        put_bytes(out, number, bytes(entry))


def time_message(text: Any) -> bytes | None:
    """``meta.Time`` of an RFC 3339 timestamp (None for anything unparsable)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    out = bytearray()
    put_int(out, 1, int(moment.timestamp()))
    if moment.microsecond:
        put_int(out, 2, moment.microsecond * 1000)
    return bytes(out)


def _object_meta_message(meta: Mapping[str, Any]) -> bytes:
    out = bytearray()
    put_str(out, 1, meta.get("name"))
    put_str(out, 2, meta.get("generateName"))
    put_str(out, 3, meta.get("namespace"))
    put_str(out, 5, meta.get("uid"))
    put_str(out, 6, meta.get("resourceVersion"))
    put_int(out, 7, meta.get("generation"))
    for number, name in ((8, "creationTimestamp"), (9, "deletionTimestamp")):
        stamp = time_message(meta.get(name))
        if stamp is not None:
            put_bytes(out, number, stamp)
    put_int(out, 10, meta.get("deletionGracePeriodSeconds"))
    put_map(out, 11, meta.get("labels"))
    put_map(out, 12, meta.get("annotations"))
    for finalizer in meta.get("finalizers") or ():
        put_str(out, 14, finalizer)
    return bytes(out)


def pod_message(obj: Mapping[str, Any]) -> bytes:
    """A bare ``core.v1.Pod`` message of the fields in the schema table (the rest dropped)."""
    out = bytearray()
    put_bytes(out, 1, _object_meta_message(obj.get("metadata") or {}))
    spec = obj.get("spec") or {}
    spec_out = bytearray()
    for container in spec.get("containers") or ():
        c = bytearray()
        put_str(c, 1, container.get("name"))
        put_str(c, 2, container.get("image"))
        put_bytes(spec_out, 2, bytes(c))
    put_str(spec_out, 3, spec.get("restartPolicy"))
    put_str(spec_out, 8, spec.get("serviceAccountName"))
    put_str(spec_out, 10, spec.get("nodeName"))
    put_str(spec_out, 19, spec.get("schedulerName"))
    put_bytes(out, 2, bytes(spec_out))
    status = obj.get("status") or {}
    status_out = bytearray()
    put_str(status_out, 1, status.get("phase"))
    put_str(status_out, 5, status.get("hostIP"))
    put_str(status_out, 6, status.get("podIP"))
    put_bytes(out, 3, bytes(status_out))
    return bytes(out)


def wrap(kind: str, message: bytes, api_version: str = "v1") -> bytes:
    """Magic + ``runtime.Unknown{typeMeta{apiVersion, kind}, raw}``: a whole body."""
    type_meta = bytearray()
    put_str(type_meta, 1, api_version)
    put_str(type_meta, 2, kind)
    out = bytearray(MAGIC)
    put_bytes(out, 1, bytes(type_meta))
    put_bytes(out, 2, message)
    put_bytes(out, 3, b"")  # contentEncoding and contentType: written empty, as Go does
    put_bytes(out, 4, b"")
    return bytes(out)


def encode_pod(obj: Mapping[str, Any]) -> bytes:
    return wrap("Pod", pod_message(obj))


def pod_list_message(
    messages: Iterable[bytes],
    *,
    resource_version: str = "",
    continue_token: str = "",
    remaining_item_count: int | None = None,
) -> bytes:
    """A bare ``PodList`` of already-encoded bare Pod messages (the emulator caches them)."""
    meta = bytearray()
    put_str(meta, 2, resource_version)
    put_str(meta, 3, continue_token)
    if remaining_item_count is not None:
        put_int(meta, 4, remaining_item_count)
    out = bytearray()
    put_bytes(out, 1, bytes(meta))
    for message in messages:
        put_bytes(out, 2, message)
    return bytes(out)


def encode_pod_list(
    items: Iterable[Mapping[str, Any]],
    *,
    resource_version: str = "",
    continue_token: str = "",
    remaining_item_count: int | None = None,
) -> bytes:
    message = pod_list_message(
        (pod_message(item) for item in items),
        resource_version=resource_version,
        continue_token=continue_token,
        remaining_item_count=remaining_item_count,
    )
    return wrap("PodList", message)


def encode_status(status: Mapping[str, Any]) -> bytes:
    """A ``metav1.Status`` body from its JSON form (code, reason, message, details)."""
    out = bytearray()
    put_bytes(out, 1, b"")
    put_str(out, 2, status.get("status"))
    put_str(out, 3, status.get("message"))
    put_str(out, 4, status.get("reason"))
    details = status.get("details")
    if isinstance(details, Mapping):
        d = bytearray()
        for number, name in _DETAIL_STRINGS.items():
            put_str(d, number, details.get(name))
        put_int(d, 5, details.get("retryAfterSeconds"))
        put_bytes(out, 5, bytes(d))
    put_int(out, 6, status.get("code"))
    return wrap("Status", bytes(out))


def encode_object(obj: Mapping[str, Any]) -> bytes:
    """A whole body for a Pod or a Status (by ``kind``; anything else is an error)."""
    kind = obj.get("kind")
    if kind == "Status":
        return encode_status(obj)
    if kind in ("Pod", None):
        return encode_pod(obj)
    raise ValueError(f"no protobuf schema for kind {kind!r}")


def encode_watch_event(event_type: str, obj: Mapping[str, Any] | bytes) -> bytes:
    """One watch frame: length + ``WatchEvent{type, object{raw}}``; ``obj`` is a dict (Pod or
    Status) or an already-encoded whole body."""
    raw = obj if isinstance(obj, bytes) else encode_object(obj)
    extension = bytearray()
    put_bytes(extension, 1, raw)
    event = bytearray()
    put_str(event, 1, event_type)
    put_bytes(event, 2, bytes(extension))
    return _FRAME_LEN.pack(len(event)) + bytes(event)
