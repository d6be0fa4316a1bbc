"""kubernetes_asyncio against the emulator: list, watch, patch, conflicts, 410s, paging."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from multusd.kubesim import KubeSim, Settings

GROUP, VERSION, NADS = "k8s.cni.cncf.io", "v1", "network-attachment-definitions"


def pod(
    name: str, node: str = "node1", namespace: str = "default", **labels: str
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }


async def test_create_get_list_with_selectors(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    created = await v1.create_namespaced_pod("default", pod("p1", app="a"))
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert created.status.phase == "Pending"
    await v1.create_namespaced_pod("default", pod("p2", node="node2", app="b"))
    await v1.create_namespaced_pod("default", pod("p3", app="b"))

    on_node1 = await v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=node1")
    assert sorted(p.metadata.name for p in on_node1.items) == ["p1", "p3"]
    app_b = await v1.list_namespaced_pod("default", label_selector="app in (b),app!=a")
    assert sorted(p.metadata.name for p in app_b.items) == ["p2", "p3"]
    by_name = await v1.list_namespaced_pod("default", field_selector="metadata.name=p2")
    assert [p.metadata.name for p in by_name.items] == ["p2"]
    got = await v1.read_namespaced_pod("p2", "default")
    assert got.spec.node_name == "node2"

    with pytest.raises(ApiException) as err:
        await v1.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert err.value.status == 400
    with pytest.raises(ApiException) as err:
        await v1.read_namespaced_pod("nope", "default")
    assert err.value.status == 404
    assert '"reason":"NotFound"' in err.value.body
    with pytest.raises(ApiException) as err:
        await v1.create_namespaced_pod("default", pod("p1"))
    assert err.value.status == 409
    assert '"reason":"AlreadyExists"' in err.value.body
    with pytest.raises(ApiException) as err:
        await v1.create_namespaced_pod("missing-ns", pod("p9", namespace="missing-ns"))
    assert err.value.status == 404


async def test_resource_versions_are_monotonic_across_kinds(
    kubesim: KubeSim, api_client: client.ApiClient
):
    v1 = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    a = await v1.create_namespaced_pod("default", pod("a"))
    nad = await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", NADS,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NetworkAttachmentDefinition",
         "metadata": {"name": "n1"}, "spec": {"config": "{}"}},
    )  # fmt: skip
    b = await v1.create_namespaced_pod("default", pod("b"))
    rvs = [int(a.metadata.resource_version), int(nad["metadata"]["resourceVersion"]),
           int(b.metadata.resource_version)]  # fmt: skip
    assert rvs == sorted(rvs) and len(set(rvs)) == 3
    listed = await v1.list_namespaced_pod("default")
    assert int(listed.metadata.resource_version) == kubesim.store.resource_version


async def test_stale_update_is_409_and_status_put_keeps_annotations(
    kubesim: KubeSim, api_client: client.ApiClient
):
    """Multus writes network-status with GET + PUT pods/status and retries on 409."""
    v1 = client.CoreV1Api(api_client)
    await v1.create_namespaced_pod("default", pod("p"))
    first = await v1.read_namespaced_pod("p", "default")
    second = await v1.read_namespaced_pod("p", "default")

    first.metadata.annotations = {"k8s.v1.cni.cncf.io/network-status": '[{"name":"x"}]'}
    updated = await v1.replace_namespaced_pod_status("p", "default", first)
    assert updated.metadata.annotations["k8s.v1.cni.cncf.io/network-status"] == '[{"name":"x"}]'
    assert int(updated.metadata.resource_version) > int(first.metadata.resource_version)

    second.metadata.annotations = {"other": "1"}
    with pytest.raises(ApiException) as err:
        await v1.replace_namespaced_pod_status("p", "default", second)
    assert err.value.status == 409
    assert '"reason":"Conflict"' in err.value.body
    assert kubesim.stats.count("update", "pods", "status") == 2

    # A status PUT cannot change the spec; a main-resource PUT cannot change the status.
    latest = await v1.read_namespaced_pod("p", "default")
    latest.spec.node_name = "elsewhere"
    latest.status.phase = "Running"
    after = await v1.replace_namespaced_pod_status("p", "default", latest)
    assert after.spec.node_name == "node1"
    assert after.status.phase == "Running"


async def test_patch_kinds(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    await v1.create_namespaced_pod("default", pod("p", app="a"))

    # dict body → strategic merge patch; containers merge by name.
    patched = await v1.patch_namespaced_pod(
        "p", "default",
        {"metadata": {"annotations": {"k": "v"}},
         "spec": {"containers": [{"name": "c", "image": "busybox:2"}]}},
    )  # fmt: skip
    assert patched.metadata.annotations == {"k": "v"}
    assert [(c.name, c.image) for c in patched.spec.containers] == [("c", "busybox:2")]
    # list body → JSON patch.
    patched = await v1.patch_namespaced_pod(
        "p", "default", [{"op": "add", "path": "/metadata/labels/extra", "value": "1"}]
    )
    assert patched.metadata.labels == {"app": "a", "extra": "1"}
    # JSON merge patch deleting a key.
    patched = await v1.patch_namespaced_pod(
        "p", "default", {"metadata": {"labels": {"extra": None}}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    assert patched.metadata.labels == {"app": "a"}

    await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", NADS,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NetworkAttachmentDefinition",
         "metadata": {"name": "n1"}, "spec": {"config": "{}"}},
    )  # fmt: skip
    nad = await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", NADS, "n1",
        {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"}}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    assert nad["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"}
    assert nad["metadata"]["generation"] == 1
    # Strategic merge is not offered for custom resources (415), as upstream.
    with pytest.raises(ApiException) as err:
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", NADS, "n1", {"spec": {"config": "x"}},
            _content_type="application/strategic-merge-patch+json",
        )  # fmt: skip
    assert err.value.status == 415
    # The generated client sends a dict with the json-patch media type unless told otherwise;
    # the apiserver rejects that with 400, and so do we.
    with pytest.raises(ApiException) as err:
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", NADS, "n1", {"spec": {"config": "x"}}
        )
    assert err.value.status == 400


async def collect(
    func: Any, *args: Any, count: int, timeout: float = 10, **kwargs: Any
) -> tuple[list[tuple[str, Any]], watch.Watch]:
    events: list[tuple[str, Any]] = []
    w = watch.Watch(return_type="object")
    async with asyncio.timeout(timeout):
        async for ev in w.stream(func, *args, **kwargs):
            events.append((ev["type"], ev["object"]))
            if len(events) >= count:
                break
    await w.close()
    return events, w


async def test_watch_from_list_version(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    await v1.create_namespaced_pod("default", pod("before"))
    listed = await v1.list_namespaced_pod("default")
    rv = listed.metadata.resource_version

    async def writes() -> None:
        while kubesim.stats.open_watches == 0:
            await asyncio.sleep(0.02)
        await v1.create_namespaced_pod("default", pod("after", node="node2"))
        await v1.patch_namespaced_pod("after", "default", {"metadata": {"labels": {"x": "1"}}})
        await v1.delete_namespaced_pod("after", "default")

    task = asyncio.create_task(writes())
    events, _ = await collect(
        v1.list_namespaced_pod, "default", count=3, resource_version=rv, timeout_seconds=10
    )
    await task
    assert [(t, o["metadata"]["name"]) for t, o in events] == [
        ("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after"),
    ]  # fmt: skip
    rvs = [int(o["metadata"]["resourceVersion"]) for _, o in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)


async def test_watch_without_version_starts_with_state_and_filters_by_node(
    kubesim: KubeSim, api_client: client.ApiClient
):
    v1 = client.CoreV1Api(api_client)
    kubesim.create(pod("mine", node="node1"))
    kubesim.create(pod("theirs", node="node2"))
    w = watch.Watch(return_type="object")
    seen: list[tuple[str, str]] = []
    async with asyncio.timeout(10):
        async for ev in w.stream(
            v1.list_pod_for_all_namespaces, field_selector="spec.nodeName=node1", timeout_seconds=5
        ):
            seen.append((ev["type"], ev["object"]["metadata"]["name"]))
            if len(seen) == 1:
                # Moving a pod onto the node is an ADDED for this watch; off it, a DELETED.
                kubesim.patch("pods", "default", "theirs", {"spec": {"nodeName": "node1"}})
                kubesim.patch("pods", "default", "mine", {"spec": {"nodeName": "node3"}})
            if len(seen) == 3:
                break
    await w.close()
    assert seen == [("ADDED", "mine"), ("ADDED", "theirs"), ("DELETED", "mine")]


async def test_watch_resumes_from_bookmark(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    listed = await v1.list_namespaced_pod("default")
    kubesim.create(pod("unrelated", namespace="kube-system"))  # moves the version on
    events, _ = await collect(
        v1.list_namespaced_pod, "default", count=1,
        resource_version=listed.metadata.resource_version,
        allow_watch_bookmarks=True, timeout_seconds=10,
    )  # fmt: skip
    kind, obj = events[0]
    assert kind == "BOOKMARK"
    bookmark_rv = int(obj["metadata"]["resourceVersion"])
    assert bookmark_rv == kubesim.store.resource_version

    kubesim.create(pod("later"))
    events, _ = await collect(
        v1.list_namespaced_pod, "default", count=1, resource_version=str(bookmark_rv),
        allow_watch_bookmarks=True, timeout_seconds=10,
    )  # fmt: skip
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("ADDED", "later")]


async def test_watch_timeout_sends_final_bookmark_and_ends(
    kubesim: KubeSim, api_client: client.ApiClient
):
    v1 = client.CoreV1Api(api_client)
    resp = await v1.list_namespaced_pod(
        "default", watch=True, timeout_seconds=1, allow_watch_bookmarks=True,
        resource_version=str(kubesim.store.resource_version), _preload_content=False,
    )  # fmt: skip
    async with asyncio.timeout(10):
        body = await resp.read()
    resp.release()
    lines = body.decode().splitlines()
    assert lines and all('"type":"BOOKMARK"' in line for line in lines)


async def test_410_then_relist(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    listed = await v1.list_namespaced_pod("default")
    old_rv = listed.metadata.resource_version
    kubesim.create(pod("x"))
    kubesim.compact()

    # kubernetes_asyncio retries a 410 once with the same version, then raises.
    with pytest.raises(ApiException) as err:
        await collect(v1.list_namespaced_pod, "default", count=1, resource_version=old_rv)
    assert err.value.status == 410
    assert kubesim.stats.count("watch", "pods") == 2

    relisted = await v1.list_namespaced_pod("default")
    assert [p.metadata.name for p in relisted.items] == ["x"]
    kubesim.create(pod("y"))
    events, _ = await collect(
        v1.list_namespaced_pod, "default", count=1,
        resource_version=relisted.metadata.resource_version, timeout_seconds=10,
    )  # fmt: skip
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("ADDED", "y")]


async def test_history_window_expires_old_versions(short_tmp: Path):
    async with KubeSim(Settings(history_limit=3)) as sim:
        start = sim.store.resource_version
        for i in range(5):
            sim.create(pod(f"p{i}"))
        cfg = client.Configuration()
        await config.load_kube_config(
            config_file=str(await sim.write_kubeconfig(short_tmp / "kc")),
            client_configuration=cfg,
        )
        async with client.ApiClient(cfg) as api:
            v1 = client.CoreV1Api(api)
            with pytest.raises(ApiException) as err:
                await collect(
                    v1.list_namespaced_pod, "default", count=1, resource_version=str(start)
                )
            assert err.value.status == 410
            # The last three writes are still resumable.
            events, _ = await collect(
                v1.list_namespaced_pod, "default", count=2,
                resource_version=str(sim.store.resource_version - 2), timeout_seconds=5,
            )  # fmt: skip
            assert [o["metadata"]["name"] for _, o in events] == ["p3", "p4"]


async def test_list_paging(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    for i in range(7):
        kubesim.create(pod(f"p{i}"))
    names: list[str] = []
    token = None
    pages = 0
    while True:
        page = await v1.list_namespaced_pod("default", limit=3, _continue=token)
        pages += 1
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(names)
    assert pages == 3
    assert names == [f"p{i}" for i in range(7)]


async def test_delete_returns_object_or_status(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    kubesim.create(pod("p"))
    deleted = await v1.delete_namespaced_pod("p", "default")
    assert deleted.metadata.name == "p"
    kubesim.create(
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NetworkAttachmentDefinition",
         "metadata": {"name": "n"}, "spec": {"config": "{}"}}
    )  # fmt: skip
    status = await custom.delete_namespaced_custom_object(GROUP, VERSION, "default", NADS, "n")
    assert status["kind"] == "Status" and status["status"] == "Success"
    assert status["details"]["name"] == "n"


async def test_events_can_be_created(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "web."},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
        "reason": "AddedInterface",
        "message": "Add net1 [10.1.1.5/24] from default/macvlan-conf",
        "type": "Normal",
        "source": {"component": "multus"},
    }
    created = await v1.create_namespaced_event("default", event)
    assert created.metadata.name.startswith("web.")
    found = await v1.list_namespaced_event(
        "default", field_selector="involvedObject.name=web,reason=AddedInterface"
    )
    assert [e.message for e in found.items] == [event["message"]]
    assert kubesim.stats.count("create", "events") == 1
