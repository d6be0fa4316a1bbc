"""List then watch one resource into a ``Store``, forever, surviving whatever the API does.

This is client-go's reflector, which no Python Kubernetes client provides. One ``run()`` loop:

* **list**, in one of two ways, both decoding one object (or one page) at a time so that a big
  list never sits in memory whole:

  - a **streaming list** (``streaming``, KEP-3157): one watch with ``sendInitialEvents=true``,
    ``resourceVersionMatch=NotOlderThan`` and bookmarks; the server sends the current objects
    as ADDED events, then a BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` at their
    version, and the same stream goes on as the watch. A server without the feature refuses
    the parameters (422); the reflector then lists in pages for the rest of its life, as
    client-go falls back;
  - a **paged list** (``limit``/``continue``), trimming each page as it arrives; a 410 on a
    continue token (the list outlived the server's history) restarts the list, and a second
    one falls back to one unpaged list, as client-go's pager does, so the list always
    finishes. The version asked for is client-go's choice, so that a thousand daemons
    starting at once are answered from the apiserver's watch cache rather than by etcd (see
    ``_list``). That cache answers a list at resourceVersion "0" whole, ignoring ``limit``:
    against a real apiserver it is the streaming list that bounds the transient memory;

  the new objects replace the store's in one swap (``Store.replace``), and an object whose UID
  and version did not change is kept as the store already has it, so a relist costs memory
  only for what changed;
* **watch** from the list's resourceVersion with bookmarks and a random ``timeoutSeconds``
  (spreading the re-watches of many daemons); when the server ends the stream at that timeout
  the watch simply resumes from the last version seen, no relist;
* an **inactivity watchdog**: a stream silent for longer than ``inactivity_timeout`` (the
  server sends a bookmark about every minute) is treated as dead and restarted. Half-open
  connections behind NAT and load balancers are the classic cause of silently stale caches
  (kopf's long issue history);
* **a version the server rejects** means a relist, as client-go does: 410 Gone/Expired (the
  version left the server's history: relist "not older than" it), and ``Timeout: Too large
  resource version`` or an invalid version (the server is older than what we saw, as after an
  etcd restore, or does not know it: relist from scratch, a consistent list without a
  version). Resuming the watch instead would retry forever, or, once the restored server's
  versions pass ours, silently keep objects that no longer exist (old UIDs);
* **any other error** waits with exponential backoff and full jitter (honouring Retry-After),
  then resumes the watch from the last version (or retries the relist). The backoff resets
  after a healthy watch, a second rejection in a row without progress is backed off too, and a
  stream that ends at once without a single event counts as an error (client-go's "very short
  watch"), so a misbehaving server can never make this loop spin.

No tasks are spawned: cancelling ``run()`` closes the one open request and ends it at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from multusd.heap import return_freed_memory
from multusd.k8s.errors import ApiError, Gone, error_from_status
from multusd.k8s.store import (
    ADDED,
    BOOKMARK,
    DELETED,
    MODIFIED,
    Store,
    key_of,
    resource_version_of,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# A watch that ends normally this soon with no event at all is a server misbehaving.
_SHORT_WATCH = 1.0
# The annotation of the bookmark that ends a streaming list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# Streaming lists that end (or go silent) before that bookmark, in a row, before we stop asking
# for them: a server or proxy that accepts the parameters but never finishes the list.
_INCOMPLETE_STREAMS = 3


def rejected_version(exc: ApiError) -> str:
    """Why the server refused the resourceVersion a list or watch named: "expired" (410: older
    than its history), "too large" (newer than it has: client-go's
    ``isTooLargeResourceVersionError``, a 504 Timeout whose text says so, as every apiserver
    version words it), "invalid" (a 400/422 about the version itself), or "" (something else).
    """
    message = exc.message.lower()
    if isinstance(exc, Gone) or exc.reason in ("Expired", "Gone"):
        return "expired"
    if (exc.status == 504 or exc.reason == "Timeout") and "too large resource version" in message:
        return "too large"
    compact = message.replace(" ", "")
    if exc.status in (400, 422) and "resourceversion" in compact and not refuses_streaming(exc):
        return "invalid"
    return ""


def refuses_streaming(exc: ApiError) -> bool:
    """A server that does not do streaming lists: kube-apiserver with its WatchList feature gate
    off (alpha in 1.27-1.31, off by default again in 1.33: "sendInitialEvents is forbidden for
    watch unless the WatchList feature gate is enabled") or from before it ("resourceVersionMatch
    is forbidden for watch"), both a 422 Invalid on ``ListOptions``."""
    message = exc.message.lower()
    return exc.status in (400, 422) and (
        "sendinitialevents" in message or "resourceversionmatch" in message
    )


class ListWatchClient(Protocol):
    """The two calls a reflector needs (``KubeClient`` has them)."""

    async def get(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the HTTP request's own timeout
    ) -> Obj: ...

    def watch(
        self, path: str, params: Mapping[str, str]
    ) -> AbstractAsyncContextManager[AsyncIterator[Obj]]: ...


@dataclass(frozen=True, slots=True)
class ReflectorSettings:
    page_size: int = 500
    """Objects per list page (``limit``); 0 lists in one request. Smaller pages lower the
    transient peak of a big list, which the allocator keeps as RSS (measured with 1k realistic
    pods: +23 MiB at 500, +6 MiB at 100), at the cost of more requests."""
    watch_timeout: tuple[float, float] = (300.0, 600.0)
    """``timeoutSeconds`` of each watch is drawn from this range (client-go: 5–10 min)."""
    inactivity_timeout: float = 90.0
    """A watch with no event or bookmark for this long is restarted."""
    backoff: tuple[float, float] = (0.8, 30.0)
    """Initial and largest error backoff (client-go's reflector: 800 ms, 30 s)."""
    streaming: bool = False
    """(Re)list with a streaming list (a watch with ``sendInitialEvents``) instead of paged
    lists; a server that refuses it gets paged lists from then on."""


class Backoff:
    """Exponential backoff with full jitter: the n-th delay is uniform in
    [0, min(max, initial·2ⁿ)] (the AWS "full jitter" scheme: retries of many clients spread
    out instead of arriving in waves). A server's Retry-After is a floor. ``reset()`` after
    success starts over."""

    def __init__(self, initial: float, maximum: float, *, rng: random.Random | None = None) -> None:
        self.initial = initial
        self.maximum = maximum
        self.attempts = 0
        self._rng = rng or random.Random()

    def next_delay(self, retry_after: float | None = None) -> float:
        ceiling = min(self.maximum, self.initial * 2.0 ** min(self.attempts, 32))
        self.attempts += 1
        delay = self._rng.uniform(0.0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.maximum))
        return delay

    def reset(self) -> None:
        self.attempts = 0


@dataclass(frozen=True, slots=True)
class ReflectorStatistics:
    name: str
    synced: bool
    lists: int  # complete lists (the first and every relist)
    last_list_seconds: float  # how long the last complete list took (all pages)
    list_pages: int
    list_restarts: int  # lists restarted because their continue token expired
    watches: int  # watch requests started
    restarts: int  # watches started again after the first (any reason)
    relists_410: int  # relists forced by 410 Gone
    inactivity_timeouts: int
    errors: int  # failures that were backed off
    last_error: str
    events: int
    bookmarks: int
    resource_version: str
    backoff_seconds: float  # total time spent backing off
    relists_rejected: int  # relists from scratch: a version too large (restored server), invalid
    last_rejection: str  # the server's words for the last version it rejected
    streaming: bool  # lists are streaming lists (False: paged, by setting or server refusal)


class _WatchSilent(Exception):
    """The inactivity watchdog fired."""


class _ShortWatch(Exception):
    """The stream ended at once without a single event."""


class _ContinueExpired(Exception):
    """A list's continue token outlived the server's history."""


class _StreamIncomplete(Exception):
    """A streaming list's stream ended before its initial-events-end bookmark."""


class _Unlistable(Exception):
    """Even a list without a version was refused for its version: a server to back off from."""

    def __init__(self, exc: ApiError) -> None:
        super().__init__(str(exc))
        self.retry_after = exc.retry_after


class Reflector:
    """Keeps ``store`` equal to the API's view of ``path`` (a collection path such as
    ``/api/v1/pods``), filtered by the selectors, until cancelled."""

    def __init__(
        self,
        client: ListWatchClient,
        path: str,
        store: Store,
        *,
        trim: Callable[[Obj], Obj],
        field_selector: str = "",
        label_selector: str = "",
        settings: ReflectorSettings | None = None,
        name: str = "pods",
    ) -> None:
        self.client = client
        self.path = path
        self.store = store
        self.trim = trim
        self.settings = settings or ReflectorSettings()
        self.name = name
        self._selectors: dict[str, str] = {}
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        self._backoff = Backoff(*self.settings.backoff)
        self._rng = random.Random()
        self._rv: str | None = None  # None: the next step is a (re)list
        self._list_from = "0"  # the resourceVersion the next list asks for (see _list)
        self._streaming = self.settings.streaming
        self._initial: dict[str, Obj] | None = None  # a streaming list's objects so far
        self._incomplete_streams = 0
        self._list_started = 0.0
        self._watch_events = 0  # events seen by the current (or last) watch
        self._lists = 0
        self._last_list_seconds = 0.0
        self._pages = 0
        self._list_restarts = 0
        self._watches = 0
        self._relists_410 = 0
        self._relists_rejected = 0
        self._last_rejection = ""
        self._silent = 0
        self._errors = 0
        self._last_error = ""
        self._events = 0
        self._bookmarks = 0
        self._backoff_total = 0.0

    def statistics(self) -> ReflectorStatistics:
        return ReflectorStatistics(
            name=self.name,
            synced=self.store.synced.is_set(),
            lists=self._lists,
            last_list_seconds=self._last_list_seconds,
            list_pages=self._pages,
            list_restarts=self._list_restarts,
            watches=self._watches,
            restarts=max(0, self._watches - 1),
            relists_410=self._relists_410,
            inactivity_timeouts=self._silent,
            errors=self._errors,
            last_error=self._last_error,
            events=self._events,
            bookmarks=self._bookmarks,
            resource_version=self._rv or "",
            backoff_seconds=self._backoff_total,
            relists_rejected=self._relists_rejected,
            last_rejection=self._last_rejection,
            streaming=self._streaming,
        )

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch, until cancelled. Never returns otherwise."""
        log.info("reflector %s: starting on %s %s", self.name, self.path, self._selectors)
        rejected_in_a_row = 0
        while True:
            try:
                if self._rv is None and self._streaming:
                    await self._watch(streaming_list=True)
                else:
                    if self._rv is None:
                        await self._list()
                    await self._watch()
            except ApiError as exc:
                listing = self._rv is None
                why = rejected_version(exc)
                if why:
                    # A rejection right after a relist that got nowhere: the server is not
                    # keeping up (or keeps rejecting us); back off instead of relisting in a
                    # loop. A streaming list that named a version is retried without one at
                    # once: that is a different request.
                    retry_differs = listing and self._list_from not in ("", "0")
                    rejected_in_a_row = 1 if self._watch_events else rejected_in_a_row + 1
                    self._relist(why, exc, listing=listing)
                    if rejected_in_a_row > 1 and not retry_differs:
                        await self._back_off(exc)
                    continue
                if listing and self._streaming and refuses_streaming(exc):
                    self._stop_streaming(str(exc))
                    continue
                await self._back_off(exc)
            except _WatchSilent:
                self._silent += 1
                log.info(
                    "reflector %s: no event for %.1f s; restarting the %s at %s",
                    self.name,
                    self.settings.inactivity_timeout,
                    "streaming list" if self._rv is None else "watch",
                    self._rv if self._rv is not None else self._list_from,
                )
                self._count_incomplete_stream()
            except _StreamIncomplete as exc:
                self._count_incomplete_stream()
                await self._back_off(exc)
            except (_Unlistable, _ShortWatch, TimeoutError, OSError) as exc:
                # ApiError covers HTTP and transport failures; a bare timeout or OS error is
                # treated the same rather than letting the cache die quietly.
                await self._back_off(exc)
            rejected_in_a_row = 0

    def _relist(self, why: str, exc: ApiError, *, listing: bool) -> None:
        """Forget the version the server rejected and choose what the relist asks for.

        client-go's ``relistResourceVersion``: after a watch's 410, the last version seen ("not
        older than", still served from the apiserver's watch cache); after anything else, or a
        410 on the (streaming) list itself, "" (a consistent read): a version from the future
        (a restored server) or one it cannot parse will not get better by asking again.
        """
        if why == "expired":
            self._relists_410 += 1
        else:
            self._relists_rejected += 1
        self._last_rejection = f"{type(exc).__name__}: {exc}"
        resume_from = self._rv
        self._rv = None
        self._list_from = resume_from if why == "expired" and resume_from and not listing else ""
        log.info(
            "reflector %s: the server rejected resourceVersion %s (%s: %s); relisting %s",
            self.name,
            resume_from if resume_from is not None else "of the list",
            why,
            exc,
            f"not older than {self._list_from}" if self._list_from else "from scratch",
        )

    def _stop_streaming(self, reason: str) -> None:
        self._streaming = False
        log.warning(
            "reflector %s: the API server does not do streaming lists (%s); "
            "listing in pages from now on",
            self.name,
            reason,
        )

    def _count_incomplete_stream(self) -> None:
        if self._rv is not None or not self._streaming:
            return
        self._incomplete_streams += 1
        if self._incomplete_streams >= _INCOMPLETE_STREAMS:
            self._stop_streaming(
                f"{self._incomplete_streams} streaming lists in a row ended before their "
                "initial-events-end bookmark"
            )

    async def _back_off(self, exc: Exception) -> None:
        self._errors += 1
        self._last_error = f"{type(exc).__name__}: {exc}"
        retry_after = getattr(exc, "retry_after", None)
        delay = self._backoff.next_delay(retry_after)
        self._backoff_total += delay
        log.info(
            "reflector %s: %s; retrying in %.2f s (attempt %d)",
            self.name,
            self._last_error,
            delay,
            self._backoff.attempts,
        )
        await asyncio.sleep(delay)

    # --- list ------------------------------------------------------------------------------

    async def _list(self) -> None:
        """One complete paged list into the store, whatever it takes.

        Which version to ask for is client-go's choice (``relistResourceVersion``): "0" the
        first time, so the apiserver answers from its watch cache instead of a quorum read of
        every pod in etcd (with a node field selector, etcd has no index: each daemon's list
        would read the whole cluster); after a watch's 410, the last version seen ("not older
        than", still served from the cache); and "" (a consistent read) once the server said
        that version is gone (or too large) too, or rejected a version before.
        """
        loop = asyncio.get_running_loop()
        self._list_started = loop.time()
        page_size = self.settings.page_size
        since = self._list_from
        expired = 0
        while True:
            try:
                objects, rv = await self._list_pages(since, page_size)
                break
            except _ContinueExpired:
                # The list took longer than the server's history window. Start over; after a
                # second expiry, give up paging (client-go's pager does the same).
                self._list_restarts += 1
                expired += 1
                if expired >= 2:
                    page_size = 0
                log.info(
                    "reflector %s: list continue token expired; listing again%s",
                    self.name,
                    "" if page_size else " without pages",
                )
            except ApiError as exc:
                why = rejected_version(exc)
                if not why:
                    raise
                if since in ("", "0"):
                    raise _Unlistable(exc) from exc
                self._last_rejection = f"{type(exc).__name__}: {exc}"
                log.info(
                    "reflector %s: version %s rejected for the list (%s); consistent list",
                    self.name,
                    since,
                    why,
                )
                since = self._list_from = ""
        self._replace(objects, rv)

    async def _list_pages(self, since: str, page_size: int) -> tuple[list[Obj], str]:
        """Every page of one list, trimmed as each arrives; the resourceVersion is the first
        page's (later pages are consistent with it, and the watch from it replays whatever
        changed since). A 410 on a later page is ``_ContinueExpired``."""
        params = dict(self._selectors)
        if since:
            params["resourceVersion"] = since
        if page_size > 0:
            params["limit"] = str(page_size)
        objects: list[Obj] = []
        rv = ""
        token = ""
        while True:
            if token:
                # A continued page must not name a version: the token carries it.
                params.pop("resourceVersion", None)
                params["continue"] = token
            try:
                body = await self.client.get(self.path, params)
            except Gone as exc:
                if token:
                    raise _ContinueExpired from exc
                raise
            self._pages += 1
            objects.extend(self._known(self.trim(item)) for item in body.get("items") or ())
            meta = body.get("metadata") or {}
            if not token:
                rv = str(meta.get("resourceVersion") or "")
            token = str(meta.get("continue") or "")
            del body  # the page's decoded objects go now, not with the next page's arrival
            if not token:
                return objects, rv

    def _known(self, obj: Obj) -> Obj:
        """``obj``, or the store's own copy when that one has the same UID and version: a
        relist of an unchanged cache then allocates nothing that outlives one page or event,
        and the new copy is freed at once instead of living beside the old until the swap."""
        meta = obj.get("metadata") or {}
        stored = self.store.get(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if stored is None:
            return obj
        old = stored.get("metadata") or {}
        if old.get("uid") == meta.get("uid") and old.get("resourceVersion") == meta.get(
            "resourceVersion"
        ):
            return stored
        return obj

    def _replace(self, objects: Iterable[Obj], rv: str) -> None:
        """A complete list: the store becomes it in one swap (the old objects go with it)."""
        self.store.replace(objects, rv)
        if self._lists:
            return_freed_memory()
        self._rv = rv
        self._list_from = rv
        self._lists += 1
        self._incomplete_streams = 0
        self._last_list_seconds = asyncio.get_running_loop().time() - self._list_started
        log.info(
            "reflector %s: listed %d objects at resourceVersion %s in %.3f s%s",
            self.name,
            len(self.store),
            rv,
            self._last_list_seconds,
            " (streaming)" if self._streaming else "",
        )

    # --- watch -----------------------------------------------------------------------------

    async def _watch(self, *, streaming_list: bool = False) -> None:
        """One watch request, until the server ends it: from the last version, or, as a
        streaming list, from the current state (``_list_from`` "not older than") on.

        Returns on a normal end (the caller watches again from the version reached); raises
        ``ApiError`` for a rejected version (relist) or a failure (backoff), ``_WatchSilent``
        when the watchdog fires, ``_ShortWatch`` or ``_StreamIncomplete`` for a backoff.
        """
        low, high = self.settings.watch_timeout
        timeout_seconds = max(1, round(self._rng.uniform(low, high)))
        params = dict(self._selectors)
        params.update(
            {
                "watch": "true",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(timeout_seconds),
            }
        )
        loop = asyncio.get_running_loop()
        if streaming_list:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
            if self._list_from not in ("", "0"):
                params["resourceVersion"] = self._list_from
            self._initial = {}
            self._list_started = loop.time()
        else:
            params["resourceVersion"] = self._rv or ""
        inactivity = self.settings.inactivity_timeout
        started = loop.time()
        events = self._watch_events = 0
        self._watches += 1
        log.debug(
            "reflector %s: %s from %s (timeoutSeconds=%d)",
            self.name,
            "streaming list" if streaming_list else "watching",
            params.get("resourceVersion", '""'),
            timeout_seconds,
        )
        try:
            async with asyncio.timeout(inactivity) as watchdog:
                async with self.client.watch(self.path, params) as stream:
                    async for event in stream:
                        watchdog.reschedule(loop.time() + inactivity)
                        self._handle(event)
                        if events == 0:
                            # The stream works: the next error starts from the first delay.
                            self._backoff.reset()
                        events = self._watch_events = events + 1
        except TimeoutError as exc:
            if watchdog.expired():
                raise _WatchSilent from exc
            raise
        finally:
            unfinished, self._initial = self._initial, None  # a half list is never kept
        elapsed = loop.time() - started
        log.debug(
            "reflector %s: watch ended after %.1f s and %d events at %s",
            self.name,
            elapsed,
            events,
            self._rv,
        )
        if unfinished is not None:
            raise _StreamIncomplete(
                f"the streaming list ended after {elapsed:.3f} s and {events} events, before "
                "its initial-events-end bookmark"
            )
        if events == 0 and elapsed < _SHORT_WATCH:
            raise _ShortWatch(
                f"watch closed after {elapsed:.3f} s without a single event (very short watch)"
            )

    def _handle(self, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            log.debug("reflector %s: ignoring a %s event without an object", self.name, kind)
            return
        initial = self._initial
        if kind == BOOKMARK:
            self._bookmarks += 1
            rv = resource_version_of(obj)
            if initial is None:
                self.store.apply(BOOKMARK, obj)
                self._rv = rv or self._rv
            elif ((obj.get("metadata") or {}).get("annotations") or {}).get(
                INITIAL_EVENTS_END
            ) == "true":
                self._initial = None
                self._replace(initial.values(), rv)
        elif kind in (ADDED, MODIFIED, DELETED):
            trimmed = self.trim(obj)
            if initial is not None:
                # Still the streaming list's initial state (the server sends ADDED events;
                # the others are handled the same way for safety).
                if kind == DELETED:
                    initial.pop(key_of(trimmed), None)
                else:
                    initial[key_of(trimmed)] = self._known(trimmed)
                return
            self._events += 1
            self.store.apply(kind, trimmed)
            self._rv = resource_version_of(trimmed) or self._rv
        elif kind == "ERROR":
            # The client raises these itself; this is for one that passes them through.
            raise error_from_status(obj)
        else:
            log.debug("reflector %s: ignoring an event of type %r", self.name, kind)
