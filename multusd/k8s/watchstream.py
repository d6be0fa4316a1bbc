"""Reading a watch stream: opening it through the API client, and its events, in JSON or protobuf.

A watch is one long GET whose body never ends on its own: the events come as they happen,
newline-delimited JSON objects or, for pods read as protobuf, length-prefixed frames. Both
decode to the same ``{"type": ..., "object": {...}}`` dicts (protobuf objects already trimmed),
an ``ERROR`` event raises (``Gone`` for a 410 Status, else ``ApiError``), and every event
counts as a contact of its resource (``multusd.k8s.health``). Lists and watches are not
retried here: their one caller, the reflector, backs off on its own.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp

from multusd.k8s import kproto
from multusd.k8s.apiclient import (
    AUTH_SETTINGS,
    TRANSPORT_ERRORS,
    LimitedApiClient,
    media_type,
    resource_of,
    transport_error,
)
from multusd.k8s.errors import ApiError, Gone, TransportError, error_from_status
from multusd.protobuf import MEDIA_TYPE

Obj = dict[str, Any]


@contextlib.asynccontextmanager
async def open_watch(
    api: LimitedApiClient, path: str, params: Mapping[str, str]
) -> AsyncIterator[AsyncIterator[Obj]]:
    """The decoded events of one watch of ``path``, until the block leaves or the server ends
    the stream; the connection is the watch's own, closed either way. Opening it passes the
    token bucket and the error rules of ``LimitedApiClient.request`` like any request."""
    query = dict(params)
    query.setdefault("watch", "true")
    key = resource_of("GET", path, query)
    resp: aiohttp.ClientResponse = await api.call_api(
        path, "GET", query_params=list(query.items()), auth_settings=AUTH_SETTINGS,
        _preload_content=False,
    )  # fmt: skip
    with contextlib.closing(resp):
        api.watches_open += 1
        resource = key[1]
        contacts = api.contacts
        contacts.watch_opened(resource)
        noted = functools.partial(contacts.succeeded, resource)
        if media_type(resp.headers) == MEDIA_TYPE:
            events = _protobuf_events(resp, key, api.give_up_protobuf, noted)
        else:
            events = _events(resp, key, noted)
        try:
            yield events
        except ApiError as exc:
            if not isinstance(exc, Gone):
                api.note_failure(key, exc)
            raise
        finally:
            api.watches_open -= 1
            contacts.watch_closed(resource)
            await events.aclose()


async def _events(
    resp: aiohttp.ClientResponse, key: tuple[str, str], noted: Callable[[], None]
) -> AsyncGenerator[Obj, None]:
    """Split the stream into lines, however its chunks fall: one event carries a whole object,
    of any size. ``noted`` is told of each event."""
    buffer = bytearray()
    try:
        async for chunk in resp.content.iter_any():
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", start)) >= 0:
                line = bytes(buffer[start:end])
                start = end + 1
                if line.strip():
                    noted()
                    yield _decode_event(line, key)
            del buffer[:start]
    except TRANSPORT_ERRORS as exc:
        raise transport_error("GET", key, exc) from exc
    if buffer.strip():
        yield _decode_event(bytes(buffer), key)


async def _protobuf_events(
    resp: aiohttp.ClientResponse,
    key: tuple[str, str],
    undecodable: Callable[[str, ValueError], None],
    noted: Callable[[], None],
) -> AsyncGenerator[Obj, None]:
    """Length-prefixed protobuf watch frames, decoded to the same events as the JSON path
    (objects already trimmed). A frame we cannot decode ends the stream as a transport error
    after telling ``undecodable``, so the reflector's next watch asks for JSON."""
    reader = kproto.WatchFrameReader()
    try:
        async for chunk in resp.content.iter_any():
            try:
                events = reader.feed(chunk)
            except ValueError as exc:
                undecodable(f"watch {key[1]}", exc)
                raise TransportError(f"undecodable watch event on {key[1]}: {exc}") from exc
            for event in events:
                if event["type"] == "ERROR":
                    raise error_from_status(event["object"])
                noted()
                yield event
    except TRANSPORT_ERRORS as exc:
        raise transport_error("GET", key, exc) from exc
    try:
        reader.close()
    except ValueError as exc:
        raise TransportError(f"watch on {key[1]} ended inside an event: {exc}") from exc


def _decode_event(line: bytes, key: tuple[str, str]) -> Obj:
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise TransportError(f"undecodable watch event on {key[1]}: {exc}") from exc
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise TransportError(f"malformed watch event on {key[1]}")
    if event.get("type") == "ERROR":
        raise error_from_status(event["object"])
    return event
