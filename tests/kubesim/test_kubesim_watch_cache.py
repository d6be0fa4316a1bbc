"""The bounded watch cache: the last N changes per resource, a natural 410 beyond them worded as
upstream's watch cache words it, bounded memory, and the explicit switches still working."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from multusd.kubesim import KubeSim, Settings
from multusd.kubesim.errors import ApiError
from multusd.kubesim.resources import NAMESPACES, PODS
from multusd.kubesim.selectors import parse_field_selector, parse_label_selector
from multusd.kubesim.store import Store
from multusd.kubesim.watchcache import WATCH_CACHE_CAPACITY

LIMIT = 5


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}}


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def watch(store: Store, since: int, rt: Any = PODS) -> list[int]:
    """The versions a watch from ``since`` replays (ApiError when it is too old)."""
    watcher = store.subscribe(
        rt,
        namespace=None,
        labels=parse_label_selector(""),
        fields=parse_field_selector("", rt.selectable),
        since=since,
    )
    store.unsubscribe(watcher)
    return [d.rv for d in watcher.take()]


def too_old(store: Store, since: int, rt: Any = PODS) -> str:
    with pytest.raises(ApiError) as err:
        watch(store, since, rt)
    assert (err.value.code, err.value.reason) == (410, "Expired")
    return err.value.message


def test_default_capacity() -> None:
    assert WATCH_CACHE_CAPACITY == Settings().history_limit == 1_000


def test_the_window_keeps_the_last_n_changes_of_each_resource() -> None:
    store = Store(history_limit=LIMIT)
    for i in range(3):
        store.create(PODS, pod(f"p{i}"))  # rv 1..3
    # Nothing fell out yet: every version since the start is resumable.
    assert watch(store, 0) == [1, 2, 3]
    for i in range(3, 3 + LIMIT):
        store.create(PODS, pod(f"p{i}"))  # rv 4..8; 1..3 fall out
    assert store.history_size(PODS) == LIMIT
    assert store.oldest_resumable(PODS) == 3  # the oldest kept change (4), minus one
    assert watch(store, 3) == [4, 5, 6, 7, 8]
    assert too_old(store, 1) == "too old resource version: 1 (3)"
    assert too_old(store, 2) == "too old resource version: 2 (3)"
    # Another resource has its own window: namespace writes evict no pod change.
    for i in range(2 * LIMIT):
        store.create(NAMESPACES, namespace(f"ns{i}"))  # rv 9..18
    assert watch(store, 3) == [4, 5, 6, 7, 8]
    assert too_old(store, 8, NAMESPACES) == "too old resource version: 8 (13)"
    stats = store.statistics()
    assert stats.history == 2 * LIMIT == store.history_size()
    assert stats.history_by_resource == {"pods": LIMIT, "namespaces": LIMIT}
    assert stats.oldest_resumable == {"pods": 3, "namespaces": 13}


def test_memory_is_bounded_by_the_window() -> None:
    store = Store(history_limit=LIMIT)
    store.create(PODS, pod("p"))
    for i in range(50 * LIMIT):
        obj = store.get(PODS, "default", "p")
        assert obj is not None
        changed = obj.decode()
        changed["metadata"]["annotations"] = {"n": str(i)}
        store.update(PODS, changed, None)
    assert store.history_size() == LIMIT
    assert store.resource_version == 50 * LIMIT + 1


def test_compact_restarts_every_window() -> None:
    store = Store(history_limit=LIMIT)
    store.create(PODS, pod("a"))
    store.create(NAMESPACES, namespace("n"))
    assert store.compact() == 2
    assert store.history_size() == 0
    assert too_old(store, 1) == "too old resource version: 1 (2)"
    assert watch(store, 2) == []
    # A resource first written after the compaction starts its window there too.
    assert store.oldest_resumable(PODS) == store.oldest_resumable(NAMESPACES) == 2


@pytest.fixture
async def small() -> AsyncIterator[KubeSim]:
    async with KubeSim(Settings(history_limit=LIMIT, bookmark_interval=0.5)) as sim:
        yield sim


async def _watch_events(sim: KubeSim, query: str) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {sim.token}"}
    async with (
        aiohttp.ClientSession(sim.url, headers=headers) as http,
        http.get(f"/api/v1/namespaces/default/pods?watch=1&{query}") as resp,
    ):
        assert resp.status == 200
        return [json.loads(line) for line in (await resp.read()).splitlines()]


async def test_a_watch_from_rv_1_after_more_than_n_writes_gets_410(small: KubeSim) -> None:
    for i in range(LIMIT + 3):
        small.create(pod(f"p{i}"))
    oldest = small.store.oldest_resumable(PODS)
    (event,) = await _watch_events(small, "resourceVersion=1")
    assert event["type"] == "ERROR"
    assert event["object"] == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: 1 ({oldest})",
        "reason": "Expired",
        "code": 410,
    }
    # From the window's start it resumes, with the last N changes and nothing older.
    events = await _watch_events(small, f"resourceVersion={oldest}&timeoutSeconds=1")
    assert [e["object"]["metadata"]["name"] for e in events] == [
        f"p{i}" for i in range(3, LIMIT + 3)
    ]


async def test_the_explicit_switches_still_work(small: KubeSim) -> None:
    small.create(pod("p"))
    rv = small.store.resource_version
    small.expire_next_watches(1)
    (event,) = await _watch_events(small, f"resourceVersion={rv}")
    assert event["object"]["message"] == f"too old resource version: {rv} ({rv})"
    small.create(pod("q"))
    small.compact()
    (event,) = await _watch_events(small, f"resourceVersion={rv}")
    assert event["object"]["message"] == f"too old resource version: {rv} ({rv + 1})"
