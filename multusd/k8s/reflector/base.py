"""What a reflector is made of: its client, settings, state and statistics, and the store swap.

The list (:mod:`.listing`) and the watch (:mod:`.watching`) are parts of one loop that share
one position in the resource's history (the version reached, the version the next list asks
for) and one set of counters. They are written as two halves of one class over this base, so
that each half reads as it runs and the state stays declared in one place. Both end a list
the same way, in :meth:`ReflectorBase._replace`.
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
from multusd.k8s.reflector.policy import Backoff
from multusd.k8s.store import Store

log = logging.getLogger(__name__)

Obj = dict[str, Any]


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


class ReflectorBase:
    """A reflector's client, settings and state, and what a complete list does to its store;
    :class:`~multusd.k8s.reflector.loop.Reflector` is the one to use."""

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
