"""Kubernetes' protobuf bodies as the daemon reads them: pods, pod lists, Status, watch events.

Why by hand: the daemon reads six fields of a pod (and, of pods with DRA claims, the claims'
names), and no maintained package ships compiled ``k8s.io/api`` messages (docs/performance.md,
"Kubernetes protobuf from Python"). A schema of only those fields also trims for free:
everything else is skipped on the wire without being built, which is what makes this several
times cheaper than ``json.loads`` followed by ``trim_pod``.

The fields are walked by the project's one protobuf reader, ``multusd.protobuf``, which also
unwraps the envelope every body has (magic, ``runtime.Unknown``) and knows the watch stream's
framing. This module only reads: the emulator, the one writer of these bodies, has its own
encoder (``multusd.kubesim.protoencode``), so the daemon carries no code the emulator alone runs.

The schema this module reads (field numbers from ``k8s.io/api`` core/v1 and
``k8s.io/apimachinery`` meta/v1 and runtime ``generated.proto``; every other field is
skipped)::

    runtime.RawExtension { bytes raw = 1; }
    meta.WatchEvent      { string type = 1; RawExtension object = 2; }
    meta.ListMeta        { string resourceVersion = 2; string continue = 3;
                           int64 remainingItemCount = 4; }
    meta.ObjectMeta      { string name = 1; string namespace = 3; string uid = 5;
                           string resourceVersion = 6; map<string,string> annotations = 12; }
    meta.Status          { string status = 2; string message = 3; string reason = 4;
                           StatusDetails details = 5; int32 code = 6; }
    meta.StatusDetails   { string name = 1; string group = 2; string kind = 3;
                           string uid = 6; int32 retryAfterSeconds = 5; }
    core.Pod             { ObjectMeta metadata = 1; PodSpec spec = 2; PodStatus status = 3; }
    core.PodList         { ListMeta metadata = 1; repeated Pod items = 2; }
    core.PodSpec         { string nodeName = 10; }
    core.PodStatus       { repeated PodResourceClaimStatus resourceClaimStatuses = 15;
                           PodExtendedResourceClaimStatus extendedResourceClaimStatus = 18; }
    core.PodResourceClaimStatus { string name = 1; string resourceClaimName = 2; }
    core.PodExtendedResourceClaimStatus {
                           repeated ContainerExtendedResourceRequest requestMappings = 1;
                           string resourceClaimName = 2; }
    core.ContainerExtendedResourceRequest { string resourceName = 2; string requestName = 3; }

Decoded pods are exactly ``multusd.k8s.store.trim_pod`` of the JSON form: Go writes empty
strings on the protobuf wire where JSON's ``omitempty`` leaves them out, so empty values are
dropped here. The DRA claim statuses (``multusd.k8s.dra``) are the exception, in
``store.trim_claim_statuses``' shape: their strings are kept empty, and ``resourceClaimName``
is a Go pointer, written (empty or not) exactly when it is set. A pod without claims has no
``status``. Malformed or truncated input raises ``ValueError``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

from multusd.protobuf import (
    FRAME_LEN,
    LEN,
    VARINT,
    Buf,
    envelope,
    map_entry,
    scan,
    signed,
    tag,
    text,
)

MAX_FRAME = 64 << 20  # a frame longer than this is corruption, not a pod (etcd caps ~1.5 MiB)

Obj = dict[str, Any]


_META_STRINGS = {
    tag(1, LEN): "name",
    tag(3, LEN): "namespace",
    tag(5, LEN): "uid",
    tag(6, LEN): "resourceVersion",
}
_T_ANNOTATIONS = tag(12, LEN)
_OBJECT_META = frozenset((*_META_STRINGS, _T_ANNOTATIONS))
_T_METADATA = tag(1, LEN)
_T_SPEC = tag(2, LEN)
_T_STATUS = tag(3, LEN)
_POD = frozenset((_T_METADATA, _T_SPEC, _T_STATUS))
_T_NODE_NAME = tag(10, LEN)
_POD_SPEC = frozenset((_T_NODE_NAME,))
_T_CLAIM_STATUSES = tag(15, LEN)
_T_EXTENDED_CLAIM = tag(18, LEN)
_POD_STATUS = frozenset((_T_CLAIM_STATUSES, _T_EXTENDED_CLAIM))
_T_1 = tag(1, LEN)
_T_2 = tag(2, LEN)
_T_3 = tag(3, LEN)
_FIELDS_1_2 = frozenset((_T_1, _T_2))
_MAPPING = frozenset((_T_2, _T_3))


def _object_meta(buf: Buf, a: int, b: int) -> Obj:
    meta: Obj = {}
    annotations: dict[str, str] = {}
    names = _META_STRINGS
    intern = sys.intern
    for field, x, y in scan(buf, a, b, _OBJECT_META):
        if field == _T_ANNOTATIONS:
            key, value = map_entry(buf, x, y)
            annotations[intern(key)] = value
        elif x != y:
            meta[names[field]] = text(buf, x, y)
        else:
            meta.pop(names[field], None)
    if annotations:
        meta["annotations"] = annotations
    return meta


def _pod(buf: Buf, a: int, b: int) -> Obj:
    meta: Obj = {}
    node = ""
    status: Obj = {}
    for field, x, y in scan(buf, a, b, _POD):
        if field == _T_METADATA:
            meta = _object_meta(buf, x, y)
        elif field == _T_SPEC:
            for _, n1, n2 in scan(buf, x, y, _POD_SPEC):
                node = text(buf, n1, n2)
        else:
            status = _claim_statuses(buf, x, y)
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
    }
    if status:
        pod["status"] = status
    return pod


def _claim_statuses(buf: Buf, a: int, b: int) -> Obj:
    """A ``PodStatus``' DRA claims (``store.trim_claim_statuses``' shape); the rest of the
    status (conditions, container states) is skipped on the wire."""
    claims: list[Obj] = []
    extended: Obj | None = None
    for field, x, y in scan(buf, a, b, _POD_STATUS):
        if field == _T_CLAIM_STATUSES:
            claim: Obj = {"name": ""}
            for f, c1, c2 in scan(buf, x, y, _FIELDS_1_2):
                claim["name" if f == _T_1 else "resourceClaimName"] = text(buf, c1, c2)
            claims.append(claim)
        else:
            extended = {"requestMappings": [], "resourceClaimName": ""}
            for f, e1, e2 in scan(buf, x, y, _FIELDS_1_2):
                if f == _T_2:
                    extended["resourceClaimName"] = text(buf, e1, e2)
                    continue
                mapping = {"requestName": "", "resourceName": ""}
                for g, m1, m2 in scan(buf, e1, e2, _MAPPING):
                    mapping["resourceName" if g == _T_2 else "requestName"] = text(buf, m1, m2)
                extended["requestMappings"].append(mapping)
    status: Obj = {}
    if claims:
        status["resourceClaimStatuses"] = claims
    if extended is not None:
        status["extendedResourceClaimStatus"] = extended
    return status


def pod_from_message(buf: bytes, a: int = 0, b: int | None = None) -> Obj:
    """A trimmed pod from a bare ``core.v1.Pod`` message (a list item) in ``buf[a:b]``."""
    return _pod(buf, a, len(buf) if b is None else b)


def _expect(kind: str, wanted: str) -> None:
    if kind and kind != wanted:
        raise ValueError(f"expected a {wanted}, got a {kind}")


def decode_pod(raw: bytes) -> Obj:
    """A trimmed pod (``trim_pod``'s shape) from a whole protobuf body (magic + Unknown)."""
    _, kind, a, b = envelope(raw, 0, len(raw))
    _expect(kind, "Pod")
    return _pod(raw, a, b)


_LIST_META = frozenset((tag(2, LEN), tag(3, LEN), tag(4, VARINT)))


def _list_meta(buf: Buf, a: int, b: int) -> Obj:
    meta: Obj = {}
    for field, x, y in scan(buf, a, b, _LIST_META):
        if field == tag(4, VARINT):
            meta["remainingItemCount"] = signed(buf, x, y, 64)
        elif x != y:
            meta["resourceVersion" if field == tag(2, LEN) else "continue"] = text(buf, x, y)
    return meta


_POD_LIST = frozenset((_T_METADATA, tag(2, LEN)))


def _pod_list(buf: Buf, a: int, b: int) -> tuple[list[Obj], Obj]:
    items: list[Obj] = []
    meta: Obj = {}
    for field, x, y in scan(buf, a, b, _POD_LIST):
        if field == _T_METADATA:
            meta = _list_meta(buf, x, y)
        else:
            items.append(_pod(buf, x, y))
    return items, meta


def decode_pod_list(body: bytes) -> tuple[list[Obj], str, str]:
    """``(trimmed pods, resourceVersion, continue)`` of a whole ``PodList`` body."""
    _, kind, a, b = envelope(body, 0, len(body))
    _expect(kind, "PodList")
    items, meta = _pod_list(body, a, b)
    return items, meta.get("resourceVersion", ""), meta.get("continue", "")


_STATUS_STRINGS = {tag(2, LEN): "status", tag(3, LEN): "message", tag(4, LEN): "reason"}
_T_DETAILS = tag(5, LEN)
_T_CODE = tag(6, VARINT)
_STATUS = frozenset((*_STATUS_STRINGS, _T_DETAILS, _T_CODE))
_DETAIL_STRINGS = {1: "name", 2: "group", 3: "kind", 6: "uid"}
_DETAIL_TAGS = {tag(n, LEN): name for n, name in _DETAIL_STRINGS.items()}
_T_RETRY_AFTER = tag(5, VARINT)
_STATUS_DETAILS = frozenset((*_DETAIL_TAGS, _T_RETRY_AFTER))


def _status(buf: Buf, a: int, b: int) -> Obj:
    status: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    for field, x, y in scan(buf, a, b, _STATUS):
        if field == _T_CODE:
            status["code"] = signed(buf, x, y, 32)
        elif field == _T_DETAILS:
            status["details"] = _status_details(buf, x, y)
        elif x != y:
            status[_STATUS_STRINGS[field]] = text(buf, x, y)
    return status


def _status_details(buf: Buf, a: int, b: int) -> Obj:
    details: Obj = {}
    for field, x, y in scan(buf, a, b, _STATUS_DETAILS):
        if field == _T_RETRY_AFTER:
            details["retryAfterSeconds"] = signed(buf, x, y, 32)
        elif x != y:
            details[_DETAIL_TAGS[field]] = text(buf, x, y)
    return details


def decode_status(body: bytes) -> Obj:
    """A ``metav1.Status`` (code, reason, message, details) as the JSON form's dict."""
    _, kind, a, b = envelope(body, 0, len(body))
    _expect(kind, "Status")
    return _status(body, a, b)


def _decode(body: Buf, start: int, end: int) -> Obj:
    api_version, kind, a, b = envelope(body, start, end)
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


_WATCH_EVENT = frozenset((tag(1, LEN), tag(2, LEN)))
_RAW_EXTENSION = frozenset((tag(1, LEN),))


def _watch_event(buf: Buf, a: int, b: int) -> Obj:
    event_type = ""
    obj: Obj | None = None
    for field, x, y in scan(buf, a, b, _WATCH_EVENT):
        if field == tag(1, LEN):
            event_type = text(buf, x, y)
        else:
            raw = (x, x)
            for _, r1, r2 in scan(buf, x, y, _RAW_EXTENSION):
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
            (size,) = FRAME_LEN.unpack_from(buf, pos)
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
