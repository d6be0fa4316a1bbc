"""The reflector against the API emulator: list, watch, and every way a watch goes wrong.

Each fault test runs a churn of creates, updates and deletes around the fault and then checks
that the cache holds exactly the emulator's objects at exactly its versions. When the test also
shows that no relist happened, that equality means no event was lost on the way.

Most tests list in pages (``FAST``, counted in requests); the streaming list (``STREAM``:
one watch with ``sendInitialEvents``) has tests of its own, and the relist scenarios run in
both modes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from multusd.k8s.apiconfig import load_api_config
from multusd.k8s.client import ClientSettings, KubeClient
from multusd.k8s.errors import ApiError, Gone, ServerError
from multusd.k8s.reflector.base import ReflectorSettings
from multusd.k8s.reflector.loop import Reflector
from multusd.k8s.reflector.policy import Backoff, refuses_streaming, rejected_version
from multusd.k8s.store import Store, key_of, resource_version_of, trim_nad, trim_pod
from multusd.kubesim import ErrorRule, KubeSim, Settings
from tests.waits import eventually

PODS = "/api/v1/pods"
NADS = "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"
NODE = "node1"

# Bookmarks every 0.3 s keep a healthy idle watch well inside a 1.5 s watchdog.
SIM_SETTINGS = Settings(bookmark_interval=0.3)
FAST = ReflectorSettings(
    page_size=7,
    watch_timeout=(2.0, 3.0),
    inactivity_timeout=1.5,
    backoff=(0.05, 0.4),
    streaming=False,
)
STREAM = dataclasses.replace(FAST, streaming=True)
BOTH = pytest.mark.parametrize("settings", [FAST, STREAM], ids=["paged", "streaming"])


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    async with KubeSim(SIM_SETTINGS) as emulator:
        yield emulator


@pytest.fixture
async def client(sim: KubeSim, short_tmp: Path) -> AsyncIterator[KubeClient]:
    kubeconfig = await sim.write_kubeconfig(short_tmp / "kubeconfig")
    config = await load_api_config(str(kubeconfig), environ={})
    # JSON here; test_protobuf.py runs this whole suite again over protobuf.
    async with KubeClient(config, ClientSettings(request_timeout=10.0, protobuf_pods=False)) as api:
        yield api


@contextlib.asynccontextmanager
async def running(reflector: Reflector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(reflector.run(), name=f"reflector-{reflector.name}")
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled(), "run() must only end by cancellation"


def pod(name: str, node: str | None = NODE, namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"n": "0"}},
        "spec": spec,
    }


def sim_pods(sim: KubeSim, node: str | None = None) -> dict[str, str]:
    """The emulator's pods (on ``node`` when given) as {key: resourceVersion}."""
    rt = sim.state.registry.by_path("", "v1", "pods")
    assert rt is not None
    return {
        f"{e.namespace}/{e.name}": str(e.rv)
        for e in sim.store.iter_entries(rt)
        if node is None or e.fields.get("spec.nodeName") == node
    }


def cached(store: Store) -> dict[str, str]:
    return {key_of(o): resource_version_of(o) for o in store.items()}


def sim_uids(sim: KubeSim) -> dict[str, str]:
    rt = sim.state.registry.by_path("", "v1", "pods")
    assert rt is not None
    return {f"{e.namespace}/{e.name}": e.uid for e in sim.store.iter_entries(rt)}


def cached_uids(store: Store) -> dict[str, str]:
    return {key_of(o): str(o["metadata"]["uid"]) for o in store.items()}


async def converged(sim: KubeSim, store: Store, node: str | None = None) -> None:
    """Wait (bounded) until the cache equals the emulator; fail showing both if it never does."""
    with contextlib.suppress(AssertionError):
        await eventually(lambda: cached(store) == sim_pods(sim, node), 10)
    assert cached(store) == sim_pods(sim, node)


async def churn(
    sim: KubeSim,
    prefix: str,
    count: int = 40,
    *,
    fault: Callable[[], object] | None = None,
    pause: float = 0.01,
) -> None:
    """Creates, updates and deletes, with ``fault()`` called halfway through."""
    for i in range(count):
        name = f"{prefix}-{i}"
        sim.create(pod(name))
        if i % 3 == 0:
            sim.patch("pods", "default", name, {"metadata": {"annotations": {"n": str(i)}}})
        if i % 4 == 1:
            sim.delete("pods", "default", f"{prefix}-{i - 1}")
        if i % 7 == 2:
            sim.create(pod(f"{prefix}-other-{i}", node="node2"))
        if fault is not None and i == count // 2:
            fault()
        # The churn's pace (the scenario, not a wait): events spread over the watch, so that
        # the fault falls amid them. What is checked after is waited for (``converged``).
        await asyncio.sleep(pause)


async def synced(store: Store, timeout: float = 10.0) -> None:
    """Wait (bounded) for the reflector's first list to fill ``store``."""
    async with asyncio.timeout(timeout):
        await store.synced.wait()


def expire_and_drop(sim: KubeSim) -> None:
    """The next watch gets a 410 (its version is gone) and the current ones end: the
    reflector must relist rather than resume."""
    sim.expire_next_watches(1)
    sim.drop_watches("eof")


def seed(sim: KubeSim, count: int, prefix: str = "seed") -> None:
    for i in range(count):
        sim.create(pod(f"{prefix}-{i}", node=NODE if i % 2 == 0 else "node2"))


def pod_reflector(client: KubeClient, store: Store, **kw: Any) -> Reflector:
    kw.setdefault("settings", FAST)
    return Reflector(client, PODS, store, trim=trim_pod, **kw)


# --- the happy path ----------------------------------------------------------------------------


async def test_initial_list_sync_and_events(sim: KubeSim, client: KubeClient) -> None:
    seed(sim, 20)
    store = Store()
    reflector = pod_reflector(client, store)
    async with running(reflector):
        await synced(store)
        assert cached(store) == sim_pods(sim)
        assert store.get("default", "seed-0") == trim_pod(sim.get("pods", "default", "seed-0"))
        # 20 pods plus nothing else, 7 per page: three pages, one list.
        assert sim.stats.count("list", "pods") == 3
        stats = reflector.statistics()
        assert (stats.lists, stats.list_pages, stats.synced) == (1, 3, True)

        await churn(sim, "live")
        await converged(sim, store)
        stats = reflector.statistics()
        assert stats.events > 0
        assert stats.lists == 1 and stats.errors == 0
        assert sim.stats.count("list", "pods") == 3  # watch only, never listed again

        # Requests carry what the reflector is meant to ask for: the first list from the
        # watch cache (resourceVersion=0), continued pages by token alone.
        lists = [r.query for r in sim.stats.requests() if r.verb == "list"]
        assert lists[0] == "resourceVersion=0&limit=7"
        assert all("continue=" in q and "resourceVersion" not in q for q in lists[1:])
        watch = next(r for r in sim.stats.requests() if r.verb == "watch")
        assert "allowWatchBookmarks=true" in watch.query
        assert "resourceVersion=" in watch.query and "timeoutSeconds=" in watch.query


async def test_wait_for_object_created_later(sim: KubeSim, client: KubeClient) -> None:
    store = Store()
    async with running(pod_reflector(client, store)):
        await synced(store)
        loop = asyncio.get_running_loop()
        waiter = asyncio.create_task(store.wait_for("default", "late", loop.time() + 10))
        await eventually(lambda: store.statistics().waiters == 1)  # it waits for "late"
        assert not waiter.done()
        sim.create(pod("late"))
        found = await waiter
        assert found is not None and found["metadata"]["name"] == "late"
        assert await store.wait_for("default", "never", loop.time() + 0.2) is None


async def test_normal_stream_end_rewatches_without_relist(sim: KubeSim, client: KubeClient) -> None:
    """timeoutSeconds=1: the server ends each watch; the reflector resumes from its version."""
    store = Store()
    settings = ReflectorSettings(watch_timeout=(1.0, 1.0), inactivity_timeout=5.0)
    reflector = pod_reflector(client, store, settings=settings)
    async with running(reflector):
        await churn(sim, "c", count=20, pause=0.12)  # ~2.4 s: spans several watches
        await converged(sim, store)
    stats = reflector.statistics()
    assert stats.watches >= 3
    assert stats.lists == 1 and stats.errors == 0
    assert sim.stats.count("list", "pods") == 1


async def test_node_field_selector(sim: KubeSim, client: KubeClient) -> None:
    seed(sim, 10)
    store = Store()
    async with running(pod_reflector(client, store, field_selector=f"spec.nodeName={NODE}")):
        await synced(store)
        assert cached(store) == sim_pods(sim, NODE)
        assert len(store) == 5
        # A pod scheduled onto the node later arrives (ADDED as it enters the selector)...
        sim.create(pod("pending", node=None))
        sim.patch("pods", "default", "pending", {"spec": {"nodeName": NODE}})
        # ...and one moved off it leaves (DELETED as it leaves the selector).
        sim.patch("pods", "default", "seed-0", {"spec": {"nodeName": "node2"}})
        await churn(sim, "sel", count=20)
        await converged(sim, store, NODE)
        assert store.get("default", "pending") is not None
        assert store.get("default", "seed-0") is None
        assert all(o["spec"]["nodeName"] == NODE for o in store.items())
    request = next(r for r in sim.stats.requests() if r.verb == "watch")
    assert "fieldSelector=spec.nodeName" in request.query


async def test_nad_reflector(sim: KubeSim, client: KubeClient) -> None:
    store = Store()
    config = '{"cniVersion":"0.3.1","type":"macvlan"}'
    nad: dict[str, Any] = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "macvlan", "namespace": "default"},
        "spec": {"config": config},
    }
    sim.create(nad)
    reflector = Reflector(
        client, NADS, store, trim=trim_nad, settings=FAST, name="network-attachment-definitions"
    )
    async with running(reflector):
        await synced(store)
        got = store.get("default", "macvlan")
        assert got is not None and got["spec"]["config"] == config
        loop = asyncio.get_running_loop()
        sim.create({**nad, "metadata": {"name": "late", "namespace": "kube-system"}})
        assert await store.wait_for("kube-system", "late", loop.time() + 10) is not None


# --- paging ------------------------------------------------------------------------------------


async def test_expired_continue_token_restarts_the_list(sim: KubeSim, client: KubeClient) -> None:
    """The history is compacted between two pages: the continue token gets 410 and the list
    starts over (the watch is not involved)."""
    from multusd.kubesim import LatencyRule

    seed(sim, 20)
    sim.faults.latency.append(LatencyRule(0.2, verb="list", resource="pods"))
    store = Store()
    reflector = pod_reflector(client, store)
    async with running(reflector):
        # The second page's request has arrived (and sleeps in the latency rule): the first
        # page's version is fixed, so a write plus a compaction expires its token.
        await eventually(lambda: sim.stats.count("list", "pods") >= 2)
        sim.create(pod("during-list"))
        sim.compact()
        await synced(store, 15)
        sim.faults.latency.clear()
        await churn(sim, "after", count=10)
        await converged(sim, store)
    stats = reflector.statistics()
    assert stats.list_restarts == 1 and stats.lists == 1
    assert sim.stats.count_code(410, "list", "pods") == 1


# --- faults ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["eof", "reset"])
async def test_dropped_watch_resumes_without_loss(
    sim: KubeSim, client: KubeClient, mode: str
) -> None:
    seed(sim, 10)
    store = Store()
    reflector = pod_reflector(client, store)
    async with running(reflector):
        await synced(store)
        for round_ in range(3):
            await churn(sim, f"d{round_}", fault=lambda: sim.drop_watches(mode))
        await converged(sim, store)
        # Resumed from the last version every time: never relisted, so nothing was lost.
        assert reflector.statistics().lists == 1
        assert sim.stats.count("list", "pods") == 2  # one list of 10 pods in pages of 7
        assert reflector.statistics().watches >= 4


async def test_forced_410_relists(sim: KubeSim, client: KubeClient) -> None:
    seed(sim, 10)
    store = Store()
    reflector = pod_reflector(client, store)
    async with running(reflector):
        await synced(store)

        await churn(sim, "g", fault=lambda: expire_and_drop(sim))
        await converged(sim, store)
        stats = reflector.statistics()
        assert stats.relists_410 == 1 and stats.lists == 2
        # The relist asked for "not older than" the last version the watch had reached.
        firsts = [
            r.query for r in sim.stats.requests() if r.verb == "list" and "continue" not in r.query
        ]
        assert firsts[0] == "resourceVersion=0&limit=7"
        assert firsts[1].startswith("resourceVersion=") and firsts[1] != firsts[0]
        # This time the server has lost that version for lists too (410 on the list): the
        # reflector falls back to a consistent list, without a version, at once.
        sim.faults.errors.append(ErrorRule(410, verb="list", resource="pods", count=1))
        sim.stats.reset()
        sim.expire_next_watches(1)
        victim = next(iter(sim_pods(sim))).split("/")[1]
        sim.drop_watches("reset")
        sim.delete("pods", "default", victim)
        await converged(sim, store)
        assert store.get("default", victim) is None
        lists = [r for r in sim.stats.requests() if r.verb == "list"]
        assert [r.code for r in lists[:2]] == [410, 200]
        assert lists[0].query.startswith("resourceVersion=")
        assert "resourceVersion" not in lists[1].query


async def test_compacted_history_410_in_stream(sim: KubeSim, client: KubeClient) -> None:
    """A real 410 (ERROR event): the version fell out of the server's history."""
    store = Store()
    reflector = pod_reflector(client, store)
    async with running(reflector):
        await synced(store)
        sim.faults.set_stall(True)
        await churn(sim, "k", count=10)
        sim.compact()
        sim.drop_watches("reset")  # still stalled: the queued events are not sent
        await eventually(lambda: reflector.statistics().relists_410 >= 1)
        sim.faults.set_stall(False)
        await churn(sim, "k2", count=10)
        await converged(sim, store)
    assert reflector.statistics().relists_410 >= 1


async def test_natural_410_once_the_watch_cache_moved_on(sim: KubeSim, client: KubeClient) -> None:
    """No 410 switch: more pod changes than the server's watch cache keeps go by while the
    watch is held back, so the reflector's resume version falls out of the window, the server
    answers the ERROR 410 a real one would, and the reflector relists."""
    pods = sim.state.registry.by_path("", "v1", "pods")
    assert pods is not None
    limit = sim.store.statistics().history_limit
    store = Store()
    reflector = pod_reflector(client, store)
    async with running(reflector):
        await synced(store)
        lists = reflector.statistics().lists
        sim.faults.set_stall(True)
        sim.create(pod("busy"))
        for i in range(limit + 1):
            sim.patch("pods", "default", "busy", {"metadata": {"annotations": {"n": str(i)}}})
        assert sim.store.history_size(pods) == limit  # bounded, whatever the churn
        sim.drop_watches("reset")  # still stalled: the queued changes are never sent
        await eventually(lambda: reflector.statistics().relists_410 >= 1)
        sim.faults.set_stall(False)
        await churn(sim, "after", count=10)
        await converged(sim, store)
    stats = reflector.statistics()
    assert stats.relists_410 >= 1 and stats.lists > lists
    assert sim.faults.expire_next_watches == 0 and sim.store.compacted == 0


@pytest.mark.parametrize("code", [500, 429])
async def test_errors_on_list_and_watch_back_off_and_recover(
    sim: KubeSim, client: KubeClient, code: int
) -> None:
    seed(sim, 10)
    sim.faults.errors.append(ErrorRule(code, verb="list", resource="pods", count=2))
    store = Store()
    reflector = pod_reflector(client, store)
    async with running(reflector):
        await synced(store, 15)
        assert sim.stats.count_code(code, "list", "pods") == 2

        def fail_watches() -> None:
            sim.faults.errors.append(ErrorRule(code, verb="watch", resource="pods", count=3))
            sim.drop_watches("eof")

        await churn(sim, f"e{code}", fault=fail_watches)
        await converged(sim, store)
        assert sim.stats.count_code(code, "watch", "pods") == 3
        stats = reflector.statistics()
        assert stats.errors >= 5 and str(code) in stats.last_error
        assert stats.lists == 1  # the watch resumed from its version after the errors


async def test_retry_after_is_honoured(sim: KubeSim, client: KubeClient) -> None:
    sim.faults.errors.append(ErrorRule(429, verb="list", resource="pods", count=1, retry_after=1))
    store = Store()
    # Retry-After is honoured up to the backoff maximum, so the maximum must exceed it here.
    settings = ReflectorSettings(backoff=(0.05, 5.0))
    reflector = pod_reflector(client, store, settings=settings)
    async with running(reflector):
        await synced(store, 15)
    lists = [r for r in sim.stats.requests() if r.verb == "list"]
    assert [r.code for r in lists[:2]] == [429, 200]
    # The second list waited for the server's Retry-After, not just the 50 ms first backoff.
    assert lists[1].started - lists[0].started >= 0.9
    assert reflector.statistics().backoff_seconds >= 1.0


async def test_stalled_stream_restarted_by_the_watchdog(sim: KubeSim, client: KubeClient) -> None:
    store = Store()
    settings = ReflectorSettings(
        watch_timeout=(30.0, 30.0), inactivity_timeout=0.5, backoff=(0.05, 0.4)
    )
    reflector = pod_reflector(client, store, settings=settings)
    async with running(reflector):
        await synced(store)
        await churn(sim, "before", count=5)
        await converged(sim, store)
        sim.faults.set_stall(True)  # open streams go silent: no events, no bookmarks
        await churn(sim, "stalled", count=20)
        await eventually(lambda: reflector.statistics().inactivity_timeouts >= 2)
        sim.faults.set_stall(False)
        await churn(sim, "after", count=10)
        await converged(sim, store)
    stats = reflector.statistics()
    assert stats.lists == 1  # restarted from the last version: no relist needed
    assert stats.errors == 0


_RETRY = re.compile(r"retrying in ([0-9.]+) s \(attempt (\d+)\)")
"""The reflector's log line for a backoff: the delay drawn (to 10 ms) and the attempt."""


async def test_no_busy_loop_when_the_api_keeps_failing(
    sim: KubeSim, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="multusd.k8s.reflector")
    sim.faults.errors.append(ErrorRule(500, resource="pods"))  # every pods request, forever
    store = Store()
    settings = ReflectorSettings(backoff=(0.1, 1.0))
    reflector = pod_reflector(client, store, settings=settings)
    async with running(reflector):
        await eventually(lambda: reflector.statistics().errors >= 5, what="five failures")
    requests = [r.started for r in sim.stats.requests() if r.resource == "pods"]
    assert not store.synced.is_set()
    # Every failure was backed off (the reflector counts it as it backs off; one request may
    # have been in flight at the end): a retry without one shows as a request beyond them.
    assert abs(reflector.statistics().errors - len(requests)) <= 1
    # The delays grew, attempt after attempt (drawn from [0, 0.1], [0, 0.2], [0, 0.4], ...),
    # and each was waited out before the next request: a loop that drew a delay and went on
    # shows as a request sooner. Load only makes the gaps longer.
    retries = [(float(delay), int(attempt)) for delay, attempt in _RETRY.findall(caplog.text)]
    assert [attempt for _, attempt in retries] == list(range(1, len(retries) + 1))
    for (delay, _), before, after in zip(retries, requests, requests[1:], strict=False):
        assert after - before >= delay - 0.01, (delay, after - before)


async def test_short_watches_are_backed_off(sim: KubeSim, client: KubeClient) -> None:
    """A server that ends every watch at once, without an event, must not cause a spin."""
    store = Store()
    settings = ReflectorSettings(
        watch_timeout=(30.0, 30.0), inactivity_timeout=5.0, backoff=(0.1, 1.0)
    )
    reflector = pod_reflector(client, store, settings=settings)
    async with running(reflector):
        await synced(store)
        start = reflector.statistics()

        def going_on() -> bool:
            """Until five short watches were backed off, or a spin made a hundred watches."""
            now = reflector.statistics()
            return now.errors < start.errors + 5 and now.watches < start.watches + 100

        async with asyncio.timeout(30):  # only keeps a broken test from hanging
            while going_on():
                # The server ends every watch as soon as it starts; the 5 ms between two
                # ends are the scenario's pace, not a wait (the loop waits for the counts).
                sim.drop_watches("eof")
                await asyncio.sleep(0.005)
    stats = reflector.statistics()
    # Each watch since was backed off, or saw an event before it was ended (a bookmark, when
    # the server was slow to end it), or went silent; one may be open still. A watch started
    # again at once, without any of those, is a spin.
    accounted = sum(
        getattr(stats, name) - getattr(start, name)
        for name in ("errors", "events", "bookmarks", "inactivity_timeouts")
    )
    assert stats.watches - start.watches <= accounted + 1, (start, stats)
    assert stats.last_error.startswith("ShortWatch"), stats.last_error


async def test_cancellation_is_prompt_everywhere(sim: KubeSim, client: KubeClient) -> None:
    """Cancel while watching, while backing off, and while a list is in flight."""
    from multusd.kubesim import LatencyRule

    store = Store()
    reflector = pod_reflector(client, store)
    async with running(reflector):  # watching
        await synced(store)
    sim.faults.errors.append(ErrorRule(500, resource="pods"))
    reflector = pod_reflector(client, Store(), settings=ReflectorSettings(backoff=(30.0, 30.0)))
    async with running(reflector):  # backing off for up to 30 s
        await eventually(lambda: reflector.statistics().errors >= 1)
    sim.faults.errors.clear()
    sim.faults.latency.append(LatencyRule(30.0, verb="list"))
    sim.stats.reset()
    reflector = pod_reflector(client, Store())
    async with running(reflector):  # list in flight for 30 s
        await eventually(lambda: sim.stats.count("list", "pods") >= 1)
    assert client.statistics().watches_open == 0


def test_backoff_full_jitter_and_reset() -> None:
    import random

    backoff = Backoff(0.5, 4.0, rng=random.Random(1))
    delays = [backoff.next_delay() for _ in range(8)]
    ceilings = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    assert all(0.0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert backoff.next_delay(retry_after=3.0) >= 3.0
    assert backoff.next_delay(retry_after=100.0) == 4.0  # Retry-After capped at the maximum
    backoff.reset()
    assert backoff.next_delay() <= 0.5


# --- an API server that comes back older (etcd restore) ----------------------------------------


def query_of(request: Any) -> dict[str, str]:
    return dict(part.split("=", 1) for part in request.query.split("&") if part)


def _watches_from(sim: KubeSim, version: str) -> list[Any]:
    return [
        r
        for r in sim.stats.requests()
        if r.verb == "watch" and f"resourceVersion={version}&" in f"{r.query}&"
    ]


@BOTH
async def test_restore_to_an_older_version_relists_from_scratch(
    sim: KubeSim, client: KubeClient, settings: ReflectorSettings
) -> None:
    """The server restarts from a backup taken before the pods existed; their owners create
    them again (same names, new UIDs) at versions the reflector has already seen. Resuming
    from its last version gets ``Timeout: Too large resource version``: the reflector must
    relist from scratch, and its cache must hold the new UIDs, not the stale ones."""
    backup = sim.snapshot()
    seed(sim, 10)
    store = Store()
    reflector = pod_reflector(client, store, settings=settings)
    async with running(reflector):
        await synced(store)
        for i in range(30):  # so the re-created pods' versions stay below the cache's
            sim.patch("pods", "default", "seed-0", {"metadata": {"annotations": {"n": str(i)}}})
        await converged(sim, store)
        seen = store.resource_version
        stale = cached_uids(store)
        sim.stats.reset()
        sim.restore(backup)
        seed(sim, 10)
        assert sim.store.resource_version < int(seen)
        # Bounded wait on the cache itself: every pod with the UID the server now has.
        await eventually(lambda: cached_uids(store) == sim_uids(sim))
        assert not set(cached_uids(store).values()) & set(stale.values())
        await converged(sim, store)
        sim.create(pod("after-restore"))  # and it follows the new history
        await converged(sim, store)
    stats = reflector.statistics()
    assert stats.relists_rejected >= 1 and stats.relists_410 == 0
    assert "Too large resource version" in stats.last_rejection
    # What was asked: the old version once (the 504 answer), then a list naming no version.
    assert len(_watches_from(sim, seen)) == 1
    relists = [
        r
        for r in sim.stats.requests()
        if (r.verb == "list" and "continue=" not in r.query)
        or (r.verb == "watch" and "sendInitialEvents=true" in r.query)
    ]
    assert relists and "resourceVersion" not in query_of(relists[0])


@BOTH
async def test_a_relist_that_fails_is_backed_off(
    sim: KubeSim, client: KubeClient, settings: ReflectorSettings
) -> None:
    """After the restore, the server also fails the relist a few times: each failure waits
    for the backoff (no hot loop), and the cache still converges."""
    backup = sim.snapshot()
    seed(sim, 6)
    store = Store()
    reflector = pod_reflector(client, store, settings=settings)
    async with running(reflector):
        await synced(store)
        for i in range(20):
            sim.patch("pods", "default", "seed-0", {"metadata": {"annotations": {"n": str(i)}}})
        await converged(sim, store)
        errors = reflector.statistics().errors
        sim.stats.reset()
        verb = "watch" if settings.streaming else "list"
        sim.faults.errors.append(ErrorRule(500, verb=verb, resource="pods", count=4))
        sim.restore(backup)
        seed(sim, 6)
        await eventually(lambda: cached_uids(store) == sim_uids(sim))
        await converged(sim, store)
    stats = reflector.statistics()
    assert stats.errors - errors >= 4
    assert stats.backoff_seconds > 0
    # One rejected resume, four failed relists, one that worked, then watches: no spin.
    assert sim.stats.count(resource="pods") <= 12, sim.stats.requests()


def test_which_errors_reject_the_version() -> None:
    too_large = ServerError(
        "Timeout: Too large resource version: 1206, current: 1205", status=504, reason="Timeout"
    )
    assert rejected_version(too_large) == "too large"
    # Servers before 1.17 said it without the cause (client-go still matches the words).
    older = ServerError("Too large resource version: 9, current: 3", status=504, reason="Timeout")
    assert rejected_version(older) == "too large"
    assert rejected_version(Gone("too old resource version: 5 (9)", reason="Expired")) == "expired"
    assert rejected_version(ApiError('invalid resource version "x"', status=400)) == "invalid"
    assert rejected_version(ServerError("Timeout: request did not complete", status=504)) == ""
    assert rejected_version(ServerError("boom", status=500, reason="InternalError")) == ""
    refusal = ApiError(
        'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents '
        "is forbidden for watch unless the WatchList feature gate is enabled",
        status=422,
        reason="Invalid",
    )
    assert refuses_streaming(refusal) and rejected_version(refusal) == ""
    # A server from before streaming lists: it refuses the match parameter on a watch.
    old_server = ApiError(
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "resourceVersionMatch is forbidden for watch",
        status=422,
        reason="Invalid",
    )
    assert refuses_streaming(old_server) and rejected_version(old_server) == ""
    assert not refuses_streaming(too_large)


# --- streaming lists ---------------------------------------------------------------------------


async def test_streaming_list_syncs_from_one_watch(sim: KubeSim, client: KubeClient) -> None:
    seed(sim, 20)
    store = Store()
    reflector = pod_reflector(client, store, settings=STREAM)
    async with running(reflector):
        await synced(store)
        assert cached(store) == sim_pods(sim)
        assert store.resource_version == str(sim.store.resource_version)
        await churn(sim, "live")
        await converged(sim, store)
        stats = reflector.statistics()
        assert (stats.lists, stats.streaming, stats.errors) == (1, True, 0)
    assert sim.stats.count("list", "pods") == 0
    query = query_of(next(r for r in sim.stats.requests() if r.verb == "watch"))
    assert query["sendInitialEvents"] == "true"
    assert query["resourceVersionMatch"] == "NotOlderThan"
    assert query["allowWatchBookmarks"] == "true"
    assert "resourceVersion" not in query  # the first one is a consistent read


async def test_streaming_relist_after_410_asks_not_older_than(
    sim: KubeSim, client: KubeClient
) -> None:
    seed(sim, 10)
    store = Store()
    reflector = pod_reflector(client, store, settings=STREAM)
    async with running(reflector):
        await synced(store)

        await churn(sim, "g", fault=lambda: expire_and_drop(sim))
        await converged(sim, store)
    stats = reflector.statistics()
    assert stats.relists_410 == 1 and stats.lists == 2
    streams = [r.query for r in sim.stats.requests() if "sendInitialEvents=true" in r.query]
    assert len(streams) == 2 and "resourceVersion=" in streams[1]
    assert sim.stats.count("list", "pods") == 0


async def test_streaming_falls_back_to_paged_lists_on_a_server_without_it(
    short_tmp: Path,
) -> None:
    async with KubeSim(dataclasses.replace(SIM_SETTINGS, watch_list=False)) as old:
        seed(old, 10)
        kubeconfig = await old.write_kubeconfig(short_tmp / "old-kubeconfig")
        config = await load_api_config(str(kubeconfig), environ={})
        async with KubeClient(config, ClientSettings(protobuf_pods=False)) as api:
            store = Store()
            reflector = pod_reflector(api, store, settings=STREAM)
            async with running(reflector):
                await synced(store)
                assert cached(store) == sim_pods(old)
                old.expire_next_watches(1)
                old.drop_watches("eof")
                old.create(pod("after"))
                await converged(old, store)
            stats = reflector.statistics()
    assert stats.streaming is False and stats.lists == 2
    # Asked once; refused (422) once; never asked again, not even for the relist.
    assert old.stats.count_code(422, "watch", "pods") == 1
    assert sum("sendInitialEvents" in r.query for r in old.stats.requests()) == 1
    assert stats.errors == 0  # a refusal is not a failure to back off from


async def test_a_stalled_streaming_list_is_restarted(sim: KubeSim, client: KubeClient) -> None:
    seed(sim, 10)
    sim.faults.set_stall(True)
    store = Store()
    settings = dataclasses.replace(STREAM, inactivity_timeout=0.5)
    reflector = pod_reflector(client, store, settings=settings)
    async with running(reflector):
        await eventually(lambda: reflector.statistics().inactivity_timeouts >= 1)
        assert not store.synced.is_set() and len(store) == 0  # nothing half-listed kept
        sim.faults.set_stall(False)
        await synced(store)
        await converged(sim, store)
    assert reflector.statistics().streaming is True


# --- memory: a relist keeps what did not change ------------------------------------------------


@BOTH
async def test_relist_keeps_the_objects_that_did_not_change(
    sim: KubeSim, client: KubeClient, settings: ReflectorSettings
) -> None:
    """A relist holds the old cache and the new list at once; objects whose UID and version
    did not change are kept as they are, so the new list costs only what changed."""
    seed(sim, 10)
    store = Store()
    reflector = pod_reflector(client, store, settings=settings)
    async with running(reflector):
        await synced(store)
        before = {key_of(o): o for o in store.items()}
        sim.faults.set_stall(True)
        sim.patch("pods", "default", "seed-0", {"metadata": {"annotations": {"n": "9"}}})
        sim.expire_next_watches(1)
        sim.drop_watches("reset")
        sim.faults.set_stall(False)
        await eventually(lambda: reflector.statistics().lists == 2)
        await converged(sim, store)
    after = {key_of(o): o for o in store.items()}
    assert after["default/seed-0"] is not before["default/seed-0"]
    unchanged = [k for k in before if k != "default/seed-0"]
    assert unchanged and all(after[k] is before[k] for k in unchanged)
