"""Reading a watch stream: opening it on the transport, and its events, in JSON or protobuf.

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

from multusd.k8s import kproto
from multusd.k8s.errors import ApiError, Gone, TransportError, error_from_status
from multusd.k8s.http import StreamResponse
from multusd.k8s.ratelimit import Priority
from multusd.k8s.transport import (
    TRANSPORT_ERRORS,
    Transport,
    error_of,
    resource_of,
    transport_error,
)
from multusd.protobuf import MEDIA_TYPE

Obj = dict[str, Any]


@contextlib.asynccontextmanager
async def open_watch(
    transport: Transport, path: str, params: Mapping[str, str]
) -> AsyncIterator[AsyncIterator[Obj]]:
    """The decoded events of one watch of ``path``, until the block leaves or the server ends
    the stream; the connection is the watch's own, closed either way."""
    http = transport.http()
    query = dict(params)
    query.setdefault("watch", "true")
    key = resource_of("GET", path, query)
    headers = await transport.prepare(key, Priority.REQUEST)
    async with contextlib.AsyncExitStack() as stack:
        try:
            resp = await stack.enter_async_context(
                http.stream(
                    "GET", path, params=query, headers=headers,
                    read_timeout=transport.watch_read_timeout,
                )
            )  # fmt: skip
        except TRANSPORT_ERRORS as exc:
            transport.statuses[0] += 1
            lost = transport_error("GET", key, exc)
            transport.note_failure(key, lost, True)
            raise lost from exc
        if resp.status >= 400:
            transport.statuses[resp.status] += 1
            try:
                payload = await resp.read()
            except TRANSPORT_ERRORS:
                payload = b""
            err = error_of(resp.status, payload, resp.headers, resp.content_type)
            transport.note_failure(key, err, True)
            raise err
        transport.statuses[resp.status] += 1
        transport.watches_open += 1
        resource = key[1]
        contacts = transport.contacts
        contacts.succeeded(resource)
        contacts.watch_opened(resource)
        noted = functools.partial(contacts.succeeded, resource)
        if resp.content_type == MEDIA_TYPE:
            events = _protobuf_events(resp, key, transport.give_up_protobuf, noted)
        else:
            events = _events(resp, key, noted)
        try:
            yield events
        except ApiError as exc:
            if not isinstance(exc, Gone):
                transport.note_failure(key, exc, True)
            raise
        finally:
            transport.watches_open -= 1
            contacts.watch_closed(resource)
            await events.aclose()


async def _events(
    resp: StreamResponse, key: tuple[str, str], noted: Callable[[], None]
) -> AsyncGenerator[Obj, None]:
    """Split the stream into lines, however its chunks fall: one event carries a whole object,
    of any size. ``noted`` is told of each event."""
    buffer = bytearray()
    try:
        async for chunk in resp.iter_chunks():
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
    resp: StreamResponse,
    key: tuple[str, str],
    undecodable: Callable[[str, ValueError], None],
    noted: Callable[[], None],
) -> AsyncGenerator[Obj, None]:
    """Length-prefixed protobuf watch frames, decoded to the same events as the JSON path
    (objects already trimmed). A frame we cannot decode ends the stream as a transport error
    after telling ``undecodable``, so the reflector's next watch asks for JSON."""
    reader = kproto.WatchFrameReader()
    try:
        async for chunk in resp.iter_chunks():
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
