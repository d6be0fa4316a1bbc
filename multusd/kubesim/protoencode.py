"""Kubernetes protobuf, written: the field writers and the bodies the emulator sends.

The daemon only reads protobuf (``multusd.k8s.kproto``, on the one reader ``multusd.protobuf``),
so everything that writes it lives here, with its user: the emulator frames its responses and
watch frames with ``wrap``, ``pod_list_message``, ``encode_status`` and ``encode_watch_event``,
and writes its complete pods and other kinds from the tables of ``multusd.kubesim.podproto`` and
``multusd.kubesim.kindproto`` with the field writers (``put_*``, ``time_message``). The CRI test
rig (``tests/e2e/cri/criapi.py``) writes its messages with the same field writers.

The field numbers are stated here on their own, not taken from the daemon's decoder: the
emulator plays the API server, the other party, and a wrong number in the decoder must not be
mirrored by the writer that tests it.

``pod_message``, ``encode_pod``, ``encode_pod_list`` and ``encode_object`` write only the fields
below (the daemon's six and a few more): the decoder's tests use them to make small pods. The
emulator itself writes every field a pod carries (``multusd.kubesim.podproto``). The schema they
write (``k8s.io/api`` core/v1 and ``k8s.io/apimachinery`` meta/v1 and runtime
``generated.proto``)::

    runtime.Unknown      { TypeMeta typeMeta = 1; bytes raw = 2;
                           string contentEncoding = 3; string contentType = 4; }
    runtime.TypeMeta     { string apiVersion = 1; string kind = 2; }
    runtime.RawExtension { bytes raw = 1; }
    meta.WatchEvent      { string type = 1; RawExtension object = 2; }
    meta.ListMeta        { string resourceVersion = 2; string continue = 3;
                           int64 remainingItemCount = 4; }
    meta.ObjectMeta      { string name = 1; string generateName = 2; string namespace = 3;
                           string uid = 5; string resourceVersion = 6; int64 generation = 7;
                           Time creationTimestamp = 8; Time deletionTimestamp = 9;
                           int64 deletionGracePeriodSeconds = 10;
                           map<string,string> labels = 11; map<string,string> annotations = 12;
                           repeated string finalizers = 14; }
    meta.Time            { int64 seconds = 1; int32 nanos = 2; }
    meta.Status          { ListMeta metadata = 1; string status = 2; string message = 3;
                           string reason = 4; StatusDetails details = 5; int32 code = 6; }
    meta.StatusDetails   { string name = 1; string group = 2; string kind = 3;
                           string uid = 6; int32 retryAfterSeconds = 5; }
    core.Pod             { ObjectMeta metadata = 1; PodSpec spec = 2; PodStatus status = 3; }
    core.PodList         { ListMeta metadata = 1; repeated Pod items = 2; }
    core.PodSpec         { repeated Container containers = 2; string restartPolicy = 3;
                           string serviceAccountName = 8; string nodeName = 10;
                           string schedulerName = 19; }
    core.Container       { string name = 1; string image = 2; }
    core.PodStatus       { string phase = 1; string hostIP = 5; string podIP = 6; }
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from multusd.protobuf import FRAME_LEN, LEN, MAGIC, VARINT

# meta.StatusDetails' string fields, in the order they are written.
_DETAIL_STRINGS = ((1, "name"), (2, "group"), (3, "kind"), (6, "uid"))


def put_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a varint (the field writers below are all built on it)."""
    value &= 0xFFFFFFFFFFFFFFFF  # negative int32/int64 go out as 10-byte two's complement
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def put_bytes(out: bytearray, number: int, data: bytes) -> None:
    """Append a length-delimited field, even an empty one (Go writes an empty message)."""
    put_varint(out, number << 3 | LEN)
    put_varint(out, len(data))
    out += data


def put_str(out: bytearray, number: int, value: Any) -> None:
    """Append a string field; an empty or non-string value is left out, as JSON's omitempty
    leaves it out of the stored object."""
    if isinstance(value, str) and value:
        put_bytes(out, number, value.encode())


def put_int(out: bytearray, number: int, value: Any) -> None:
    """Append a varint field for an int value (bools and anything else are left out)."""
    if isinstance(value, int) and not isinstance(value, bool):
        put_varint(out, number << 3 | VARINT)
        put_varint(out, value)


def put_map(out: bytearray, number: int, mapping: Any) -> None:
    """Append a ``map<string,string>``: one entry message {key = 1, value = 2} per item."""
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
    """A whole body (magic + Unknown) of ``pod_message``."""
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
    """A whole ``PodList`` body of ``pod_message`` items and the given list metadata."""
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
        for number, name in _DETAIL_STRINGS:
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
    return FRAME_LEN.pack(len(event)) + bytes(event)
