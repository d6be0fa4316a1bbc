"""The watch stream: newline-delimited JSON events (or protobuf frames, for pods when asked)
over a chunked 200 response.

Like the apiserver's watch cache: ``resourceVersion`` "" or "0" starts with the current state as
ADDED events; a version inside the resource's window of kept changes (``store``) resumes after
it; an older one gets an ERROR event carrying a 410 Expired Status, "too old resource version:
X (Y)", and a newer one (from before an etcd restore) a 504 "Too large resource version" (HTTP
status stays 200, as with the real cacher). Bookmarks go out every ``bookmark_interval`` to
clients that asked, and once more just before the watch's ``timeoutSeconds`` ends it, so a
client can always resume from where it stopped.

Streaming lists (``sendInitialEvents=true``, KEP-3157) follow the apiserver's rules: they need
``resourceVersionMatch=NotOlderThan`` (422 otherwise, as ``validateWatchOptions`` words it),
send the current state as ADDED events whatever the version asked ("not older than" it: a
version the server has not reached is the 504 above), then, when bookmarks were allowed, a
BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` at the version that state is at, and
then the changes after it. ``Settings.watch_list=False`` refuses them as a server without the
WatchList feature does.

A bookmark's version is read in the same synchronous step that drained the watcher's queue; the
store offers every write to the queue as it happens, so nothing at or below that version can
still be pending for this watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from multusd.kubesim.encoding import Encoder, dumps
from multusd.kubesim.errors import ApiError, bad_request, invalid_list_options, too_large, too_old
from multusd.kubesim.resources import ResourceType
from multusd.kubesim.selectors import FieldSelector, LabelSelector
from multusd.kubesim.state import State
from multusd.kubesim.watchcache import BOOKMARK, ERROR, Delivery, Watcher

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


NOT_OLDER_THAN = "NotOlderThan"


@dataclass(frozen=True, slots=True)
class WatchParams:
    since: int | None  # None: start with the current state as ADDED events
    timeout: float
    bookmarks: bool
    initial_events_end: bool
    not_older_than: int | None = None  # a streaming list's version; newer than ours: 504
    from_now: bool = False  # no initial state, whatever the version says


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def _forbidden(field: str, detail: str) -> tuple[str, str, str]:
    return (field, "FieldValueForbidden", f"Forbidden: {detail}")


def _validate(query: dict[str, str], watch_list: bool) -> None:
    """The apiserver's ``validateWatchOptions`` for a watch's streaming-list parameters."""
    causes: list[tuple[str, str, str]] = []
    match = query.get("resourceVersionMatch", "")
    if "sendInitialEvents" in query:
        if match != NOT_OLDER_THAN:
            causes.append(
                _forbidden(
                    "resourceVersionMatch",
                    f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}",
                )
            )
        if not watch_list:
            causes.append(
                _forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate "
                    "is enabled",
                )
            )
    elif match:
        causes.append(
            _forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )
        )
    if match and match != NOT_OLDER_THAN:
        causes.append(
            (
                "resourceVersionMatch",
                "FieldValueNotSupported",
                f'Unsupported value: "{match}": supported values: "{NOT_OLDER_THAN}"',
            )
        )
    if causes:
        raise invalid_list_options(causes)


def parse_params(
    query: dict[str, str], min_request_timeout: float, *, watch_list: bool = True
) -> WatchParams:
    _validate(query, watch_list)
    rv_text = query.get("resourceVersion", "")
    version: int | None = None
    if rv_text not in ("", "0"):
        try:
            version = int(rv_text)
        except ValueError as exc:
            raise bad_request(f'invalid resource version "{rv_text}"') from exc
    send_initial = _flag(query.get("sendInitialEvents"))
    since, not_older_than = (None, version) if send_initial else (version, None)
    # sendInitialEvents=false at "" or "0": the changes from now on, without the current state.
    from_now = "sendInitialEvents" in query and not send_initial and version is None
    try:
        timeout = float(query.get("timeoutSeconds") or 0)
    except ValueError as exc:
        raise bad_request(f"invalid timeoutSeconds {query.get('timeoutSeconds')!r}") from exc
    if timeout <= 0:
        # As the apiserver: no (or a zero) timeout means a random one in [t, 2t].
        timeout = random.uniform(min_request_timeout, 2 * min_request_timeout)
    bookmarks = _flag(query.get("allowWatchBookmarks"))
    return WatchParams(
        since, timeout, bookmarks, send_initial and bookmarks, not_older_than, from_now
    )


def _bookmark(rt: ResourceType, rv: int, annotations: dict[str, str] | None = None) -> bytes:
    meta: dict[str, object] = {"resourceVersion": str(rv), "creationTimestamp": None}
    if annotations:
        meta["annotations"] = annotations
    return dumps({"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})


async def _start(request: web.Request, encoder: Encoder) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers={"Content-Type": encoder.stream_media_type})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    return resp


async def _send_error(resp: web.StreamResponse, encoder: Encoder, err: ApiError) -> None:
    with contextlib.suppress(ConnectionError):
        await resp.write(encoder.watch_event(ERROR, dumps(err.status())))
        await resp.write_eof()


@dataclass(frozen=True, slots=True)
class WatchQuery:
    """What to watch, and how to reshape each object (kubectl asks for Table rows)."""

    rt: ResourceType
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    transform: Callable[[bytes], bytes] | None = None


async def serve(
    request: web.Request, state: State, encoder: Encoder, query: WatchQuery
) -> web.StreamResponse:
    params = parse_params(
        dict(request.query),
        state.settings.min_request_timeout,
        watch_list=state.settings.watch_list,
    )
    resp = await _start(request, encoder)
    current = state.store.resource_version
    if state.faults.take_expire():
        requested = params.since if params.since is not None else current
        # As if the watch cache had just restarted its window at the current version.
        await _send_error(resp, encoder, too_old(requested, current))
        return resp
    if params.not_older_than is not None and params.not_older_than > current:
        await _send_error(resp, encoder, too_large(params.not_older_than, current))
        return resp
    try:
        watcher = state.store.subscribe(
            query.rt,
            namespace=query.namespace,
            labels=query.labels,
            fields=query.fields,
            visible=state.faults.visible,
            since=current if params.from_now else params.since,
        )
    except ApiError as err:
        await _send_error(resp, encoder, err)
        return resp
    state.stats.open_watches += 1
    try:
        reason = await _pump(resp, state, _Framer(encoder, query), watcher, params)
    except ConnectionError:
        return resp  # the client went away mid-write; nothing left to tell it
    finally:
        state.stats.open_watches -= 1
        state.store.unsubscribe(watcher)
    if reason == "reset":
        if request.transport is not None:
            request.transport.abort()
        return resp
    with contextlib.suppress(ConnectionError):
        await resp.write_eof()
    return resp


class _Framer:
    """Turns queued deliveries into the bytes of one write for one stream."""

    def __init__(self, encoder: Encoder, query: WatchQuery) -> None:
        self.encoder = encoder
        self.rt = query.rt
        self.transform = query.transform

    def frame(self, items: list[Delivery], bookmark_rv: int | None, end_initial: bool) -> bytes:
        enc = self.encoder
        chunks = []
        for d in items:
            if d.raw is not None:
                raw = self.transform(d.raw) if self.transform else d.raw
                chunks.append(enc.watch_event(d.type, raw))
        if bookmark_rv is not None:
            note = {INITIAL_EVENTS_END: "true"} if end_initial else None
            chunks.append(enc.watch_event(BOOKMARK, _bookmark(self.rt, bookmark_rv, note)))
        return b"".join(chunks)


async def _flush(
    resp: web.StreamResponse,
    framer: _Framer,
    watcher: Watcher,
    state: State,
    *,
    bookmark: bool = False,
    end_initial: bool = False,
) -> None:
    """Write everything queued, plus a bookmark at the current version when asked.

    ``take`` and reading the version happen without an await in between (see module doc).
    """
    items = watcher.take()
    rv_now = state.store.resource_version if (bookmark or end_initial) else None
    data = framer.frame(items, rv_now, end_initial)
    if data:
        await resp.write(data)


async def _first_of(*waits: Coroutine[Any, Any, Any]) -> None:
    """Return when the first of ``waits`` finishes; the others are cancelled and reaped."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _pump(
    resp: web.StreamResponse,
    state: State,
    framer: _Framer,
    watcher: Watcher,
    params: WatchParams,
) -> str:
    """Forward events until the timeout, a drop, or the client going away; returns why."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + params.timeout
    interval = state.settings.bookmark_interval
    next_bookmark = loop.time() + interval
    initial_pending = params.initial_events_end
    while True:
        now = loop.time()
        if now >= deadline:
            if params.bookmarks and not state.faults.stalled():
                await _flush(resp, framer, watcher, state, bookmark=True)
            return "timeout"
        if state.faults.stalled():
            if watcher.closed:
                return watcher.closed  # dropped while stalled: nothing more is delivered
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(deadline - now):
                    await _first_of(state.faults.wait_unstalled(), watcher.closing.wait())
            continue
        wait_until = min(deadline, next_bookmark) if params.bookmarks else deadline
        if not watcher.wakeup.is_set() and not initial_pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wait_until - now)):
                    await watcher.wakeup.wait()
        if watcher.closed:
            await _flush(resp, framer, watcher, state)
            return watcher.closed
        if state.faults.stalled():
            continue
        due = params.bookmarks and loop.time() >= next_bookmark
        if due:
            next_bookmark = loop.time() + interval
        await _flush(resp, framer, watcher, state, bookmark=due, end_initial=initial_pending)
        initial_pending = False
