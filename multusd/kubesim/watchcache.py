"""The watch side of the store: each resource's window of recent changes, and the watchers.

The store appends every write to its resource's window (:class:`WatchCache`) and offers it to
every open :class:`Watcher` of that resource at once, in the same synchronous step. The window
is what a watch resumes across; a watcher is the queue one watch stream drains.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from multusd.kubesim.entries import Entry, Visible
from multusd.kubesim.resources import ResourceType
from multusd.kubesim.selectors import FieldSelector, LabelSelector

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"


WATCH_CACHE_CAPACITY = 1_000
"""Changes kept per resource for watches to resume across.

kube-apiserver sizes its watch cache dynamically (``watch_cache.go``): it starts at
``defaultLowerBoundCapacity`` = 100 events per resource type, doubles while the oldest event it
would drop is younger than ``eventFreshDuration`` (75 s), up to ``defaultUpperBoundCapacity`` =
100 * 1024, and halves again when even its newest quarter is older than that. The emulator
keeps a fixed window instead: tests and benchmarks write in bursts, where the real cache would
have grown, and 1,000 is enough for a reflector to resume across any one burst of ours while a
test that wants a natural 410 only has to outrun it (or set ``Settings.history_limit`` lower).
"""


@dataclass(slots=True, frozen=True)
class Change:
    """One write, as history keeps it: the type, the object after it, and the object before."""

    rv: int
    rt: ResourceType
    type: str
    new: Entry
    old: Entry | None


@dataclass(slots=True)
class Delivery:
    """One item queued for a watcher; ``raw`` is None for a bookmark."""

    type: str
    rv: int
    raw: bytes | None
    annotations: Mapping[str, str] | None = None


@dataclass(slots=True, eq=False)
class Watcher:
    """A subscription: filters plus a queue the watch stream drains.

    The queue is bounded like the apiserver's per-watcher buffer; a watcher that falls that far
    behind is closed (its client rewatches from the last version it saw), rather than letting
    memory grow without limit.
    """

    rt: ResourceType
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    visible: Visible
    capacity: int
    queue: deque[Delivery] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    closed: str | None = None

    def matches(self, entry: Entry) -> bool:
        if self.namespace is not None and entry.namespace != self.namespace:
            return False
        return (
            self.labels.matches(entry.labels)
            and self.fields.matches(entry.fields)
            and self.visible(self.rt, entry)
        )

    def offer(self, change: Change) -> None:
        """Queue ``change`` as this watcher sees it (selector transitions become ADDED/DELETED)."""
        if self.closed:
            return
        new_match = self.matches(change.new)
        if change.type == ADDED:
            kind = ADDED if new_match else None
        elif change.type == DELETED:
            kind = DELETED if new_match else None
        else:
            old_match = change.old is not None and self.matches(change.old)
            if old_match and new_match:
                kind = MODIFIED
            elif new_match:
                kind = ADDED
            elif old_match:
                kind = DELETED
            else:
                kind = None
        if kind is not None:
            self.push(Delivery(kind, change.rv, change.new.raw))

    def push(self, item: Delivery) -> None:
        if self.closed:
            return
        if len(self.queue) >= self.capacity:
            self.close("overflow")
            return
        self.queue.append(item)
        self.wakeup.set()

    def close(self, reason: str) -> None:
        if not self.closed:
            self.closed = reason
        self.wakeup.set()
        self.closing.set()

    def take(self) -> list[Delivery]:
        items = list(self.queue)
        self.queue.clear()
        if not self.closed:
            self.wakeup.clear()
        return items


class WatchCache:
    """The last changes of one resource type, oldest first (the watch cache's event window)."""

    __slots__ = ("changes", "evicted", "floor")

    def __init__(self, capacity: int, floor: int) -> None:
        self.changes: deque[Change] = deque(maxlen=capacity)
        self.evicted = False  # whether a change fell out since the window was last reset
        self.floor = floor  # the version the window was (re)started at

    def append(self, change: Change) -> None:
        if len(self.changes) == self.changes.maxlen:
            self.evicted = True
        self.changes.append(change)

    def oldest_resumable(self) -> int:
        """The oldest version a watch can resume from. As ``getAllEventsSinceLocked``: until a
        change falls out, every version since the window started; then the oldest kept
        change's version minus one (the "oldest - 1" in upstream's 410 message)."""
        if self.evicted:
            return self.changes[0].rv - 1
        return self.floor

    def reset(self, rv: int) -> None:
        self.changes.clear()
        self.evicted = False
        self.floor = rv
