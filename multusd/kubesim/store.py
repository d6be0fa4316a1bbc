"""Object storage with one cluster-wide resourceVersion and a bounded watch cache per resource.

Objects are kept encoded (:mod:`multusd.kubesim.entries`): a list of 50,000 pods is then one
join of stored bytes, and memory is about the size of the JSON rather than three times it as
dicts. Writers decode, change and re-encode one object; that is the cheap side.

Every write takes the next resourceVersion and appends a change to its resource's watch cache,
which keeps the last ``history_limit`` changes of that resource, as the apiserver's watch cache
(``apiserver/pkg/storage/cacher/watch_cache.go``) keeps a window per resource type: a watch may
resume from any version the window still covers, and an older one gets 410 Expired, which is
what makes clients relist. ``compact`` empties every window at once, as a relist of the cache
(or an etcd compaction, for continue tokens) would. ``snapshot`` and ``restore`` are an etcd
backup and its restore: the versions go back to the backup's, below what clients have seen.
Each window and the watchers are :mod:`multusd.kubesim.watchcache`.

All methods are synchronous and run on the event loop thread, so a write, its history entry and
its delivery to every open watcher happen atomically with respect to other requests.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from multusd.kubesim.entries import Entry, ObjKey, Visible, encode_entry
from multusd.kubesim.errors import already_exists, conflict, not_found, too_large, too_old
from multusd.kubesim.resources import ResourceType
from multusd.kubesim.selectors import FieldSelector, LabelSelector
from multusd.kubesim.watchcache import (
    ADDED,
    DELETED,
    MODIFIED,
    WATCH_CACHE_CAPACITY,
    Change,
    Delivery,
    WatchCache,
    Watcher,
)


def _always(_rt: ResourceType, _entry: Entry) -> bool:
    return True


class _Table:
    """The objects of one resource type, with a lazily rebuilt sorted key list for paging."""

    __slots__ = ("entries", "sorted_keys")

    def __init__(self) -> None:
        self.entries: dict[ObjKey, Entry] = {}
        self.sorted_keys: list[ObjKey] | None = None


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
        self._caches: dict[ResourceType, WatchCache] = {}
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
        entry = encode_entry(rt, obj, self._rv)
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
        entry = encode_entry(rt, obj, self._rv)
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
        entry = encode_entry(rt, old.decode(), self._rv)
        self._record(Change(self._rv, rt, DELETED, entry, old))
        return entry

    def _record(self, change: Change) -> None:
        cache = self._caches.get(change.rt)
        if cache is None:
            cache = self._caches[change.rt] = WatchCache(self._history_limit, self._compacted)
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
