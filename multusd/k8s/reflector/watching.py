"""One watch request: a streaming list's or one from a version, its watchdog, its events.

A streaming list is a watch too (``sendInitialEvents``): its ADDED events are the list, until
the bookmark that ends them, and the same stream goes on as the watch. So both are one request
here, with the inactivity watchdog over it and the events applied to the store (or, during a
streaming list's initial state, collected until its end bookmark swaps them in). How the
request ended is an exception for the loop to act on.
"""

from __future__ import annotations

import asyncio
import logging

from multusd.k8s.errors import error_from_status
from multusd.k8s.reflector.base import Obj, ReflectorBase
from multusd.k8s.store import (
    ADDED,
    BOOKMARK,
    DELETED,
    MODIFIED,
    key_of,
    resource_version_of,
)

log = logging.getLogger(__name__)

# A watch that ends normally this soon with no event at all is a server misbehaving.
_SHORT_WATCH = 1.0
# The annotation of the bookmark that ends a streaming list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class WatchSilent(Exception):
    """The inactivity watchdog fired."""


class ShortWatch(Exception):
    """The stream ended at once without a single event."""


class StreamIncomplete(Exception):
    """A streaming list's stream ended before its initial-events-end bookmark."""


class Watching(ReflectorBase):
    """The reflector's watch (the loop is :class:`~multusd.k8s.reflector.loop.Reflector`)."""

    async def _watch(self, *, streaming_list: bool = False) -> None:
        """One watch request, until the server ends it: from the last version, or, as a
        streaming list, from the current state (``_list_from`` "not older than") on.

        Returns on a normal end (the caller watches again from the version reached); raises
        ``ApiError`` for a rejected version (relist) or a failure (backoff), ``WatchSilent``
        when the watchdog fires, ``ShortWatch`` or ``StreamIncomplete`` for a backoff.
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
                raise WatchSilent from exc
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
            raise StreamIncomplete(
                f"the streaming list ended after {elapsed:.3f} s and {events} events, before "
                "its initial-events-end bookmark"
            )
        if events == 0 and elapsed < _SHORT_WATCH:
            raise ShortWatch(
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
