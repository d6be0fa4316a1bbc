"""List then watch one resource into a ``Store``, forever, surviving whatever the API does.

This is client-go's reflector, which no Python Kubernetes client provides. One ``run()`` loop:

* **list** in pages (``limit``/``continue``), trimming each page as it arrives so a 50k-pod list
  never sits in memory whole; a 410 on a continue token (the list outlived the server's
  history) restarts the list, and a second one falls back to one unpaged list, as client-go's
  pager does, so the list always finishes. The version asked for is client-go's choice, so
  that a thousand daemons starting at once are answered from the apiserver's watch cache
  rather than by etcd (see ``_list``);
* **watch** from the list's resourceVersion with bookmarks and a random ``timeoutSeconds``
  (spreading the re-watches of many daemons); when the server ends the stream at that timeout
  the watch simply resumes from the last version seen, no relist;
* an **inactivity watchdog**: a stream silent for longer than ``inactivity_timeout`` (the
  server sends a bookmark about every minute) is treated as dead and restarted. Half-open
  connections behind NAT and load balancers are the classic cause of silently stale caches
  (kopf's long issue history);
* **410 Gone** (HTTP, or an ERROR event) means the version left the server's history: relist;
* **any other error** waits with exponential backoff and full jitter (honouring Retry-After),
  then resumes the watch from the last version. The backoff resets after a healthy watch, and a
  stream that ends at once without a single event counts as an error (client-go's "very short
  watch"), so a misbehaving server can never make this loop spin.

No tasks are spawned: cancelling ``run()`` closes the one open request and ends it at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from multusd.k8s.errors import ApiError, Gone, error_from_status
from multusd.k8s.store import ADDED, BOOKMARK, DELETED, MODIFIED, Store, resource_version_of

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# A watch that ends normally this soon with no event at all is a server misbehaving.
_SHORT_WATCH = 1.0


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


class _WatchSilent(Exception):
    """The inactivity watchdog fired."""


class _ShortWatch(Exception):
    """The stream ended at once without a single event."""


class _ContinueExpired(Exception):
    """A list's continue token outlived the server's history."""


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
        self._watch_events = 0  # events seen by the current (or last) watch
        self._lists = 0
        self._last_list_seconds = 0.0
        self._pages = 0
        self._list_restarts = 0
        self._watches = 0
        self._relists_410 = 0
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
        )

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch, until cancelled. Never returns otherwise."""
        log.info("reflector %s: starting on %s %s", self.name, self.path, self._selectors)
        gone_in_a_row = 0
        while True:
            try:
                if self._rv is None:
                    await self._list()
                await self._watch()
            except Gone as exc:
                self._relists_410 += 1
                # A 410 from a watch that got nowhere after a relist: the server is not
                # keeping up (or keeps expiring us); back off instead of relisting in a loop.
                gone_in_a_row = 1 if self._watch_events else gone_in_a_row + 1
                log.info("reflector %s: %s; relisting", self.name, exc)
                self._list_from = self._rv or "0"
                self._rv = None
                if gone_in_a_row > 1:
                    await self._back_off(exc)
                continue
            except _WatchSilent:
                self._silent += 1
                log.info(
                    "reflector %s: no event for %.1f s; restarting the watch at %s",
                    self.name,
                    self.settings.inactivity_timeout,
                    self._rv,
                )
            except (ApiError, _ShortWatch, TimeoutError, OSError) as exc:
                # ApiError covers HTTP and transport failures; a bare timeout or OS error is
                # treated the same rather than letting the cache die quietly.
                await self._back_off(exc)
            gone_in_a_row = 0

    async def _back_off(self, exc: Exception) -> None:
        self._errors += 1
        self._last_error = f"{type(exc).__name__}: {exc}"
        retry_after = exc.retry_after if isinstance(exc, ApiError) else None
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
        """One complete list into the store, whatever it takes.

        Which version to ask for is client-go's choice (``relistResourceVersion``): "0" the
        first time, so the apiserver answers from its watch cache instead of a quorum read of
        every pod in etcd (with a node field selector, etcd has no index: each daemon's list
        would read the whole cluster); after a watch's 410, the last version seen ("not older
        than", still served from the cache); and "" (a consistent read) only once the server
        said that version is gone too.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
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
            except Gone as exc:
                if since in ("", "0"):
                    raise ApiError(exc.message, status=exc.status, reason=exc.reason) from exc
                log.info("reflector %s: version %s is gone; consistent list", self.name, since)
                since = ""
        self.store.replace(objects, rv)
        self._rv = rv
        self._list_from = rv
        self._lists += 1
        self._last_list_seconds = loop.time() - started
        log.info(
            "reflector %s: listed %d objects at resourceVersion %s in %.3f s",
            self.name,
            len(objects),
            rv,
            self._last_list_seconds,
        )

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
            objects.extend(self.trim(item) for item in body.get("items") or ())
            meta = body.get("metadata") or {}
            if not token:
                rv = str(meta.get("resourceVersion") or "")
            token = str(meta.get("continue") or "")
            if not token:
                return objects, rv

    # --- watch -----------------------------------------------------------------------------

    async def _watch(self) -> None:
        """One watch request from the last version, until the server ends it.

        Returns on a normal end (the caller watches again from the version reached); raises
        ``Gone`` for a relist, ``_WatchSilent`` when the watchdog fires, ``_ShortWatch`` or
        ``ApiError`` for a backoff.
        """
        low, high = self.settings.watch_timeout
        timeout_seconds = max(1, round(self._rng.uniform(low, high)))
        params = dict(self._selectors)
        params.update(
            {
                "watch": "true",
                "resourceVersion": self._rv or "",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(timeout_seconds),
            }
        )
        inactivity = self.settings.inactivity_timeout
        loop = asyncio.get_running_loop()
        started = loop.time()
        events = self._watch_events = 0
        self._watches += 1
        log.debug(
            "reflector %s: watching from %s (timeoutSeconds=%d)",
            self.name,
            self._rv,
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
        elapsed = loop.time() - started
        log.debug(
            "reflector %s: watch ended after %.1f s and %d events at %s",
            self.name,
            elapsed,
            events,
            self._rv,
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
        if kind == BOOKMARK:
            self._bookmarks += 1
            self.store.apply(BOOKMARK, obj)
            self._rv = resource_version_of(obj) or self._rv
        elif kind in (ADDED, MODIFIED, DELETED):
            trimmed = self.trim(obj)
            self._events += 1
            self.store.apply(kind, trimmed)
            self._rv = resource_version_of(trimmed) or self._rv
        elif kind == "ERROR":
            # The client raises these itself; this is for one that passes them through.
            raise error_from_status(obj)
        else:
            log.debug("reflector %s: ignoring an event of type %r", self.name, kind)
