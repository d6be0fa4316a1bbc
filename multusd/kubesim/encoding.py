"""Wire encodings and content negotiation.

Objects are kept encoded as JSON (see ``store``), so a JSON response is mostly joining stored
bytes. An encoder is chosen per request from ``Accept`` through ``negotiate``. Protobuf exists for
the built-in kinds the emulator stores (pods, namespaces, both events), on every verb, from the
tables in ``podproto`` and ``kindproto``: a client that lists protobuf first gets it there, and
JSON for custom resources (NADs), exactly as a real apiserver answers, since those have no
protobuf form. Protobuf bodies are converted from the stored JSON on the way out; the bare
messages are cached per stored JSON object, so a big list costs one conversion per object
version, not one per request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from multusd.kubesim import podproto, protoencode
from multusd.kubesim.errors import bad_request, not_acceptable
from multusd.kubesim.kindproto import MESSAGES
from multusd.protobuf import MEDIA_TYPE, STREAM_MEDIA_TYPE

JSON_MEDIA_TYPE = "application/json"
PROTOBUF_MEDIA_TYPE = MEDIA_TYPE
_PROTO_CACHE_SIZE = 100_000  # bare messages kept, keyed by their stored JSON bytes


def dumps(obj: Any) -> bytes:
    """Compact JSON, UTF-8, like Go's encoder minus HTML escaping (clients don't care)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"error decoding request body: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Encoder:
    """How to frame stored JSON objects into responses for one media type."""

    media_type: str

    def list_body(
        self, api_version: str, kind: str, meta: dict[str, Any], items: Iterable[bytes]
    ) -> bytes:
        head = b'{"kind":"%s","apiVersion":"%s","metadata":%s,"items":[' % (
            kind.encode(),
            api_version.encode(),
            dumps(meta),
        )
        return head + b",".join(items) + b"]}"

    def watch_event(self, event_type: str, obj: bytes) -> bytes:
        return b'{"type":"%s","object":%s}\n' % (event_type.encode(), obj)

    def object(self, obj: Any) -> bytes:
        return dumps(obj)

    @property
    def stream_media_type(self) -> str:
        """The Content-Type of a watch stream in this encoding."""
        return self.media_type


JSON = Encoder(JSON_MEDIA_TYPE)


_messages: dict[bytes, bytes] = {}


def _message(raw: bytes, table: podproto.Table) -> bytes:
    """The bare protobuf message of one stored JSON object, cached (bytes cache their own
    hash; the stored JSON names its kind, so one cache serves every table)."""
    message = _messages.get(raw)
    if message is None:
        message = podproto.message(json.loads(raw), table)
        if len(_messages) >= _PROTO_CACHE_SIZE:
            del _messages[next(iter(_messages))]  # oldest first: dicts keep order
        _messages[raw] = message
    return message


@dataclass(frozen=True, slots=True)
class ProtobufEncoder(Encoder):
    """One kind (and the Status of an error or a watch ERROR) as Kubernetes protobuf, from
    stored JSON."""

    kind: str
    api_version: str
    table: podproto.Table = field(compare=False, repr=False)

    def list_body(
        self, api_version: str, kind: str, meta: dict[str, Any], items: Iterable[bytes]
    ) -> bytes:
        remaining = meta.get("remainingItemCount")
        table = self.table
        # ListMeta = 1, items = 2: every list message has this shape, PodList's encoder fits.
        message = protoencode.pod_list_message(
            (_message(raw, table) for raw in items),
            resource_version=str(meta.get("resourceVersion") or ""),
            continue_token=str(meta.get("continue") or ""),
            remaining_item_count=remaining if isinstance(remaining, int) else None,
        )
        return protoencode.wrap(kind, message, api_version)

    def watch_event(self, event_type: str, obj: bytes) -> bytes:
        # A watch carries pods (cached conversion) and, on ERROR, a Status the emulator just
        # rendered itself with "kind" first, so a prefix test tells them apart cheaply.
        if obj.startswith(b'{"kind":"Status"'):
            status = protoencode.encode_status(json.loads(obj))
            return protoencode.encode_watch_event(event_type, status)
        return protoencode.encode_watch_event(event_type, self._wrap(_message(obj, self.table)))

    def object(self, obj: Any) -> bytes:
        """A stored object (bytes) or a dict: a Status, or an object of this encoder's kind."""
        if isinstance(obj, bytes):
            return self._wrap(_message(obj, self.table))
        if obj.get("kind") == "Status":
            return protoencode.encode_status(obj)
        return self._wrap(podproto.message(obj, self.table))

    def _wrap(self, message: bytes) -> bytes:
        return protoencode.wrap(self.kind, message, self.api_version)

    @property
    def stream_media_type(self) -> str:
        return STREAM_MEDIA_TYPE


_PROTOBUF_BY_KIND = {
    key: ProtobufEncoder(PROTOBUF_MEDIA_TYPE, key[1], key[0], table)
    for key, table in MESSAGES.items()
}
PROTOBUF = _PROTOBUF_BY_KIND[("v1", "Pod")]


def protobuf_encoder(api_version: str, kind: str) -> ProtobufEncoder | None:
    """The protobuf encoder of a kind; None for kinds without a protobuf form (CRDs)."""
    return _PROTOBUF_BY_KIND.get((api_version, kind))


@dataclass(frozen=True, slots=True)
class MediaRange:
    type: str
    params: dict[str, str]


def parse_accept(header: str) -> list[MediaRange]:
    ranges: list[MediaRange] = []
    for part in header.split(","):
        pieces = [p.strip() for p in part.split(";")]
        if not pieces[0]:
            continue
        params: dict[str, str] = {}
        for p in pieces[1:]:
            name, _, value = p.partition("=")
            params[name.strip().lower()] = value.strip()
        ranges.append(MediaRange(pieces[0].lower(), params))
    return ranges


def negotiate(
    accept: str | None, *, protobuf: Encoder | None = None
) -> tuple[Encoder, MediaRange | None]:
    """Pick the encoder for ``Accept``; returns the matching range too (it may ask for a Table).

    Ranges are taken in the client's order (client-go lists its preference first); ranges we
    cannot produce are skipped, and nothing producible at all is a 406 like the apiserver's.
    ``protobuf`` is the request's resource's protobuf encoder, if it has one.
    """
    if not accept:
        return JSON, None
    ranges = parse_accept(accept)
    for r in ranges:
        if r.type in (JSON_MEDIA_TYPE, "application/*", "*/*"):
            return JSON, r
        if protobuf is not None and r.type == PROTOBUF_MEDIA_TYPE and "as" not in r.params:
            return protobuf, r
    raise not_acceptable(accept)


def request_media_type(content_type: str | None) -> str:
    """The bare media type of a request body (parameters such as charset dropped)."""
    if not content_type:
        return JSON_MEDIA_TYPE
    return content_type.split(";", 1)[0].strip().lower()


def decode_object(data: bytes) -> dict[str, Any]:
    obj = loads(data)
    if not isinstance(obj, dict):
        raise bad_request("the request body must be a JSON object")
    return obj
