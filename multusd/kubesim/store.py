"""Object storage with one cluster-wide resourceVersion and a bounded watch cache per resource.

Objects are kept *encoded*: each entry holds the JSON bytes a GET returns plus the few things
lists and watches filter on (labels, selectable fields). A list of 50,000 pods is then one join of
stored bytes, and memory is about the size of the JSON rather than three times it as dicts.
Writers decode, change and re-encode one object; that is the cheap side.

Every write takes the next resourceVersion and appends a change to its resource's watch cache,
which keeps the last ``history_limit`` changes of that resource, as the apiserver's watch cache
(``apiserver/pkg/storage/cacher/watch_cache.go``) keeps a window per resource type: a watch may
resume from any version the window still covers, and an older one gets 410 Expired, which is
what makes clients relist. ``compact`` empties every window at once, as a relist of the cache
(or an etcd compaction, for continue tokens) would. ``snapshot`` and ``restore`` are an etcd
backup and its restore: the versions go back to the backup's, below what clients have seen.

All methods are synchronous and run on the event loop thread, so a write, its history entry and
its delivery to every open watcher happen atomically with respect to other requests.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from multusd.kubesim.encoding import dumps
from multusd.kubesim.errors import already_exists, conflict, not_found, too_large, too_old
from multusd.kubesim.resources import ResourceType
from multusd.kubesim.selectors import FieldSelector, LabelSelector

ObjKey = tuple[str, str]  # (namespace or "", name)
Visible = Callable[[ResourceType, "Entry"], bool]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"


def _always(_rt: ResourceType, _entry: Entry) -> bool:
    return True


@dataclass(slots=True, frozen=True)
class Entry:
    """One stored object version: its encoded bytes and what selectors look at."""

    namespace: str
    name: str
    uid: str
    rv: int
    labels: Mapping[str, str]
    fields: Mapping[str, str]
    raw: bytes

    def decode(self) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(self.raw)
        return obj

    @property
    def key(self) -> ObjKey:
        return (self.namespace, self.name)


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


class _Table:
    """The objects of one resource type, with a lazily rebuilt sorted key list for paging."""

    __slots__ = ("entries", "sorted_keys")

    def __init__(self) -> None:
        self.entries: dict[ObjKey, Entry] = {}
        self.sorted_keys: list[ObjKey] | None = None


class _WatchCache:
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


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every object at one version, as an etcd backup holds them (entries are immutable, so
    the copy is of the tables, not of the objects)."""

    resource_version: int
    tables: Mapping[ResourceType, Mapping[ObjKey, Entry]]

    def count(self, rt: ResourceType | None = None) -> int:
        tables = self.tables.values() if rt is None else [self.tables.get(rt, {})]
        return sum(len(t) for t in tables)


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    resource_version: int
    # Per resource ("pods", "network-attachment-definitions.k8s.cni.cncf.io", ...): the oldest
    # version a watch can still resume from, and the number of changes kept for that.
    oldest_resumable: dict[str, int]
    history_by_resource: dict[str, int]
    history: int  # changes kept, all resources (at most history_limit each)
    history_limit: int
    compacted: int
    watchers: int
    objects: dict[str, int]


class Store:
    """The emulator's database."""

    def __init__(
        self, *, history_limit: int = WATCH_CACHE_CAPACITY, watcher_capacity: int = 100_000
    ) -> None:
        if history_limit < 1:
            raise ValueError(f"history_limit must be at least 1, not {history_limit}")
        self._rv = 0
        self._tables: dict[ResourceType, _Table] = {}
        self._caches: dict[ResourceType, _WatchCache] = {}
        self._history_limit = history_limit
        self._compacted = 0
        self._watchers: set[Watcher] = set()
        self._watcher_capacity = watcher_capacity

    # --- reads -----------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def compacted(self) -> int:
        """The version of the last ``compact`` or ``restore``: list continue tokens from before
        it get 410."""
        return self._compacted

    def oldest_resumable(self, rt: ResourceType) -> int:
        """The oldest version a watch on ``rt`` can resume from; older ones get 410."""
        cache = self._caches.get(rt)
        return cache.oldest_resumable() if cache else self._compacted

    def history_size(self, rt: ResourceType | None = None) -> int:
        """Changes kept for ``rt`` (for every resource when None): bounded by history_limit."""
        caches = self._caches.values() if rt is None else [self._caches.get(rt)]
        return sum(len(c.changes) for c in caches if c is not None)

    def get(self, rt: ResourceType, namespace: str, name: str) -> Entry | None:
        table = self._tables.get(rt)
        return table.entries.get((namespace, name)) if table else None

    def count(self, rt: ResourceType) -> int:
        table = self._tables.get(rt)
        return len(table.entries) if table else 0

    def iter_entries(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        visible: Visible = _always,
        after: ObjKey | None = None,
    ) -> Iterator[Entry]:
        """Matching entries in key order (namespace, then name), starting after ``after``."""
        table = self._tables.get(rt)
        if table is None:
            return
        name = fields.exact("metadata.name") if fields else None
        if name is not None and namespace is not None:
            entry = table.entries.get((namespace, name))
            candidates: list[ObjKey] = [entry.key] if entry else []
        else:
            if table.sorted_keys is None:
                table.sorted_keys = sorted(table.entries)
            candidates = table.sorted_keys
        start = bisect.bisect_right(candidates, after) if after is not None else 0
        for i in range(start, len(candidates)):
            entry = table.entries[candidates[i]]
            if namespace is not None and entry.namespace != namespace:
                continue
            if labels is not None and not labels.matches(entry.labels):
                continue
            if fields is not None and not fields.matches(entry.fields):
                continue
            if not visible(rt, entry):
                continue
            yield entry

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            resource_version=self._rv,
            oldest_resumable={
                rt.group_resource: c.oldest_resumable() for rt, c in self._caches.items()
            },
            history_by_resource={
                rt.group_resource: len(c.changes) for rt, c in self._caches.items()
            },
            history=self.history_size(),
            history_limit=self._history_limit,
            compacted=self._compacted,
            watchers=len(self._watchers),
            objects={rt.group_resource: len(t.entries) for rt, t in self._tables.items()},
        )

    # --- writes ----------------------------------------------------------------------------

    def _encode(self, rt: ResourceType, obj: dict[str, Any], rv: int) -> Entry:
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(rv)
        labels = meta.get("labels") or {}
        return Entry(
            namespace=meta.get("namespace", "") if rt.namespaced else "",
            name=meta["name"],
            uid=meta.get("uid", ""),
            rv=rv,
            labels={str(k): str(v) for k, v in labels.items()},
            fields=rt.fields(obj),
            raw=dumps(obj),
        )

    def _table(self, rt: ResourceType) -> _Table:
        table = self._tables.get(rt)
        if table is None:
            table = self._tables[rt] = _Table()
        return table

    def create(self, rt: ResourceType, obj: dict[str, Any]) -> Entry:
        """Store a new object (metadata already filled by the caller) at the next version."""
        meta = obj["metadata"]
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        table = self._table(rt)
        if key in table.entries:
            raise already_exists(rt, key[1])
        self._rv += 1
        entry = self._encode(rt, obj, self._rv)
        table.entries[key] = entry
        table.sorted_keys = None
        self._record(Change(self._rv, rt, ADDED, entry, None))
        return entry

    def update(self, rt: ResourceType, obj: dict[str, Any], expected_rv: int | None) -> Entry:
        """Replace an object; ``expected_rv`` (when given) must be the stored version (409)."""
        meta = obj["metadata"]
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        table = self._table(rt)
        old = table.entries.get(key)
        if old is None:
            raise not_found(rt, key[1])
        if expected_rv is not None and expected_rv != old.rv:
            raise conflict(rt, key[1])
        self._rv += 1
        entry = self._encode(rt, obj, self._rv)
        table.entries[key] = entry
        self._record(Change(self._rv, rt, MODIFIED, entry, old))
        return entry

    def delete(self, rt: ResourceType, namespace: str, name: str) -> Entry:
        """Remove an object; the returned entry is its last state at the deletion version."""
        table = self._table(rt)
        key = (namespace if rt.namespaced else "", name)
        old = table.entries.get(key)
        if old is None:
            raise not_found(rt, name)
        del table.entries[key]
        table.sorted_keys = None
        self._rv += 1
        entry = self._encode(rt, old.decode(), self._rv)
        self._record(Change(self._rv, rt, DELETED, entry, old))
        return entry

    def _record(self, change: Change) -> None:
        cache = self._caches.get(change.rt)
        if cache is None:
            cache = self._caches[change.rt] = _WatchCache(self._history_limit, self._compacted)
        cache.append(change)
        for watcher in self._watchers:
            if watcher.rt is change.rt:
                watcher.offer(change)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self._rv, {rt: dict(t.entries) for rt, t in self._tables.items() if t.entries}
        )

    def restore(self, snap: Snapshot) -> int:
        """Become ``snap``, as an API server does after its etcd was restored from a backup and
        it restarted: the objects are the backup's, the version counter goes back to the
        backup's (below what clients have seen: their versions are now "too large"), every
        watch cache window restarts there, continue tokens from before expire, and every open
        watch is cut (the connections of the old process are gone). Returns the version."""
        for watcher in list(self._watchers):
            watcher.close("reset")
        tables: dict[ResourceType, _Table] = {}
        for rt, entries in snap.tables.items():
            table = tables[rt] = _Table()
            table.entries = dict(entries)
        self._tables = tables
        self._rv = snap.resource_version
        for cache in self._caches.values():
            cache.reset(self._rv)
        self._compacted = self._rv
        return self._rv

    def compact(self) -> int:
        """Forget all history, as an etcd compaction at the current version does: every watch
        window restarts here, and older continue tokens expire."""
        for cache in self._caches.values():
            cache.reset(self._rv)
        self._compacted = self._rv
        return self._rv

    # --- watches ---------------------------------------------------------------------------

    def subscribe(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        visible: Visible = _always,
        since: int | None,
    ) -> Watcher:
        """Open a watcher. ``since=None`` starts with the current state as ADDED events; a
        version replays the retained changes after it, or raises 410 when it is older than the
        resource's window (``oldest_resumable``), worded as upstream's watch cache words it."""
        watcher = Watcher(rt, namespace, labels, fields, visible, self._watcher_capacity)
        if since is None:
            for entry in self.iter_entries(
                rt, namespace, labels=labels, fields=fields, visible=visible
            ):
                watcher.queue.append(Delivery(ADDED, entry.rv, entry.raw))
        else:
            oldest = self.oldest_resumable(rt)
            if since < oldest:
                raise too_old(since, oldest)
            if since > self._rv:
                raise too_large(since, self._rv)
            cache = self._caches.get(rt)
            kept = reversed(cache.changes) if cache else iter(())
            replay = list(itertools.takewhile(lambda c: c.rv > since, kept))
            for change in reversed(replay):
                watcher.offer(change)
        if watcher.queue:
            watcher.wakeup.set()
        self._watchers.add(watcher)
        return watcher

    def unsubscribe(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def watchers(self) -> list[Watcher]:
        return list(self._watchers)
