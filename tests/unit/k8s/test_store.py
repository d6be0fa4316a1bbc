"""The watch cache on its own: keys, events, relists, trimming and waiting for an object."""

from __future__ import annotations

import asyncio
from typing import Any

from multusd.k8s.store import Store, object_key, trim_nad, trim_pod


def pod(name: str, rv: str, namespace: str = "default", **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    meta["resourceVersion"] = rv
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "n1"}}


def test_keys() -> None:
    assert object_key("ns", "a") == "ns/a"
    assert object_key("", "cluster-wide") == "cluster-wide"


def test_apply_events_and_versions() -> None:
    store = Store()
    store.apply("ADDED", pod("a", "1"))
    store.apply("ADDED", pod("b", "2", namespace="other"))
    store.apply("MODIFIED", pod("a", "3", x="y"))
    assert store.get("default", "a") == pod("a", "3", x="y")
    assert store.get("other", "b") is not None
    assert store.get("default", "b") is None
    store.apply("DELETED", pod("b", "4", namespace="other"))
    store.apply("DELETED", pod("never-seen", "5"))  # tolerated
    assert [o["metadata"]["name"] for o in store.items()] == ["a"]
    stats = store.statistics()
    assert (stats.size, stats.events, stats.last_resource_version) == (1, 5, "5")
    assert not stats.synced


def test_bookmark_moves_only_the_version() -> None:
    store = Store()
    store.apply("ADDED", pod("a", "1"))
    store.apply("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "9"}})
    stats = store.statistics()
    assert (stats.size, stats.events, stats.last_resource_version) == (1, 1, "9")
    assert store.resource_version == "9"
    store.apply("SOMETHING", pod("z", "10"))  # unknown types change nothing
    assert store.get("default", "z") is None


async def test_replace_drops_vanished_and_sets_synced() -> None:
    store = Store()
    store.apply("ADDED", pod("gone", "1"))
    store.apply("ADDED", pod("kept", "2"))
    store.replace([pod("kept", "7"), pod("new", "8")], "10")
    assert store.synced.is_set()
    assert sorted(o["metadata"]["name"] for o in store.items()) == ["kept", "new"]
    assert store.get("default", "kept") == pod("kept", "7")
    stats = store.statistics()
    assert (stats.relists, stats.last_resource_version, len(store)) == (1, "10", 2)


async def test_wait_for_present_returns_at_once() -> None:
    store = Store()
    store.apply("ADDED", pod("a", "1"))
    loop = asyncio.get_running_loop()
    # Even with a deadline already past: the object is here.
    assert await store.wait_for("default", "a", loop.time() - 1) == pod("a", "1")


async def test_wait_for_woken_by_an_event() -> None:
    store = Store()
    loop = asyncio.get_running_loop()
    waiter = asyncio.create_task(store.wait_for("default", "a", loop.time() + 30))
    other = asyncio.create_task(store.wait_for("default", "b", loop.time() + 30))
    await asyncio.sleep(0)
    assert store.statistics().waiters == 2
    store.apply("ADDED", pod("a", "1"))
    assert await waiter == pod("a", "1")
    assert not other.done()
    store.apply("MODIFIED", pod("b", "2"))  # a MODIFIED for a key not yet seen also counts
    assert await other == pod("b", "2")
    assert store.statistics().waiters == 0


async def test_wait_for_woken_by_a_relist() -> None:
    store = Store()
    loop = asyncio.get_running_loop()
    waiter = asyncio.create_task(store.wait_for("default", "a", loop.time() + 30))
    await asyncio.sleep(0)
    store.replace([pod("a", "5")], "5")
    assert await waiter == pod("a", "5")


async def test_wait_for_deadline_returns_none() -> None:
    store = Store()
    loop = asyncio.get_running_loop()
    assert await store.wait_for("default", "a", loop.time() + 0.05) is None
    assert await store.wait_for("default", "a", loop.time() - 1) is None
    assert store.statistics().waiters == 0
    # A delete does not wake a waiter: the object is not there.
    waiter = asyncio.create_task(store.wait_for("default", "a", loop.time() + 0.05))
    await asyncio.sleep(0)
    store.apply("DELETED", pod("a", "3"))
    assert await waiter is None


async def test_wait_for_cancelled_leaves_nothing_behind() -> None:
    store = Store()
    loop = asyncio.get_running_loop()
    waiter = asyncio.create_task(store.wait_for("default", "a", loop.time() + 30))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert waiter.cancelled()
    assert store.statistics().waiters == 0
    store.apply("ADDED", pod("a", "1"))  # nobody left to wake; no error


async def test_many_waiters_one_key() -> None:
    store = Store()
    loop = asyncio.get_running_loop()
    waiters = [
        asyncio.create_task(store.wait_for("default", "a", loop.time() + 30)) for _ in range(5)
    ]
    await asyncio.sleep(0)
    store.apply("ADDED", pod("a", "1"))
    assert all(r == pod("a", "1") for r in await asyncio.gather(*waiters))


FULL_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web",
        "namespace": "demo",
        "uid": "u1",
        "resourceVersion": "42",
        "labels": {"app": "web"},
        "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan"},
        "managedFields": [{"manager": "kubectl"}],
        "ownerReferences": [{"kind": "ReplicaSet"}],
        "creationTimestamp": "2026-01-01T00:00:00Z",
    },
    "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}], "volumes": []},
    "status": {"phase": "Running", "podIP": "10.0.0.1"},
}


def test_trim_pod_keeps_only_what_the_daemon_reads() -> None:
    assert trim_pod(FULL_POD) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": "demo",
            "uid": "u1",
            "resourceVersion": "42",
            "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan"},
        },
        "spec": {"nodeName": "node1"},
    }
    # List items come without apiVersion/kind, unscheduled pods without a node.
    bare = trim_pod({"metadata": {"name": "p", "namespace": "d"}, "spec": {}})
    assert bare == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "d"},
        "spec": {},
    }


def test_trim_nad() -> None:
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": "macvlan",
            "namespace": "demo",
            "uid": "u2",
            "resourceVersion": "7",
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"},
            "generation": 1,
        },
        "spec": {"config": '{"cniVersion": "0.3.1"}'},
    }
    trimmed = trim_nad(nad)
    assert trimmed["metadata"] == {
        "name": "macvlan",
        "namespace": "demo",
        "uid": "u2",
        "resourceVersion": "7",
        "annotations": {"k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"},
    }
    assert trimmed["spec"] == {"config": '{"cniVersion": "0.3.1"}'}
    # A NAD without config (a reference to a file on the node) keeps an empty spec.
    assert trim_nad({"metadata": {"name": "n", "namespace": "d"}})["spec"] == {}
