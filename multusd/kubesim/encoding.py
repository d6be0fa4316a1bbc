"""Wire encodings and content negotiation.

Objects are kept encoded (see ``store``), so a response is mostly joining stored bytes. Only JSON
exists today; an encoder is chosen per request from ``Accept`` through ``negotiate`` so that a
protobuf encoder can be registered later without touching the handlers. A client that lists
protobuf first and JSON second (client-go's default) gets JSON, exactly as a real apiserver does
for custom resources.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from multusd.kubesim.errors import bad_request, not_acceptable

JSON_MEDIA_TYPE = "application/json"


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


JSON = Encoder(JSON_MEDIA_TYPE)


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


def negotiate(accept: str | None) -> tuple[Encoder, MediaRange | None]:
    """Pick the encoder for ``Accept``; returns the matching range too (it may ask for a Table).

    Ranges are taken in the client's order (client-go lists its preference first); ranges we
    cannot produce are skipped, and nothing producible at all is a 406 like the apiserver's.
    """
    if not accept:
        return JSON, None
    ranges = parse_accept(accept)
    for r in ranges:
        if r.type in (JSON_MEDIA_TYPE, "application/*", "*/*"):
            return JSON, r
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
