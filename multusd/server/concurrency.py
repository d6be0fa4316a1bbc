"""Who may run at the same time: one request per container, and an optional global cap.

Upstream runs every request concurrently, so an ADD and a DEL for the same sandbox can overlap
and race on the delegate cache. We serialise requests per container ID (the runtime's own unit)
and let different containers run fully in parallel. ``connectionLimit`` becomes a queue, not a
rejection: pods wait for a slot instead of failing; probes are never queued.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class KeyedLocks:
    """One ``asyncio.Lock`` per key, created on demand and dropped when nobody holds or waits."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        entry = self._entries.setdefault(key, _Entry())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


class RequestGate:
    """At most ``limit`` CNI requests run at once (``None``: no limit); the rest wait in order."""

    def __init__(self, limit: int | None) -> None:
        self._slots = asyncio.Semaphore(limit) if limit else None
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            yield
            return
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._slots.release()
