"""Each fault switch, driven in process and through the HTTP control API."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from multusd import protobuf
from multusd.kubesim import KubeSim
from multusd.kubesim.client import ControlClient
from multusd.kubesim.faults import ErrorRule, LatencyRule
from tests.kubeapi import pod, watch_events


async def test_latency(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    kubesim.faults.latency.append(LatencyRule(seconds=0.3, verb="list", resource="pods"))
    loop = asyncio.get_running_loop()
    start = loop.time()
    await v1.list_namespaced_pod("default")
    assert loop.time() - start >= 0.3
    start = loop.time()
    await v1.list_namespace()  # other resources are not delayed (no upper bound asserted)


async def test_error_count_500_then_recovers(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    kubesim.faults.errors.append(ErrorRule(code=500, verb="list", resource="pods", count=1))
    with pytest.raises(ApiException) as err:
        await v1.list_namespaced_pod("default")
    assert err.value.status == 500
    assert json.loads(err.value.body)["reason"] == "InternalError"
    await v1.list_namespaced_pod("default")
    assert kubesim.stats.count_code(500, "list", "pods") == 1
    assert kubesim.stats.count_code(200, "list", "pods") == 1


async def test_429_has_retry_after(kubesim: KubeSim, http: aiohttp.ClientSession):
    kubesim.faults.errors.append(ErrorRule(code=429, verb="get", retry_after=7))
    kubesim.create(pod("p"))
    async with http.get("/api/v1/namespaces/default/pods/p") as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "7"
        body = await resp.json()
    assert body["reason"] == "TooManyRequests"
    assert body["details"] == {"retryAfterSeconds": 7}
    # Lists are not "get": unaffected.
    async with http.get("/api/v1/namespaces/default/pods") as resp:
        assert resp.status == 200


async def test_error_rate_is_seeded(kubesim: KubeSim, http: aiohttp.ClientSession):
    kubesim.faults.apply_dict({"seed": 42, "errors": [{"code": 503, "rate": 0.5}]})
    codes = []
    for _ in range(40):
        async with http.get("/api/v1/namespaces") as resp:
            codes.append(resp.status)
    assert set(codes) == {200, 503}
    # Discovery is never faulted.
    async with http.get("/api/v1") as resp:
        assert resp.status == 200


async def test_subresource_scoped_error(kubesim: KubeSim, api_client: client.ApiClient):
    v1 = client.CoreV1Api(api_client)
    kubesim.create(pod("p"))
    kubesim.faults.errors.append(ErrorRule(code=500, verb="update", subresource="status"))
    current = await v1.read_namespaced_pod("p", "default")
    with pytest.raises(ApiException) as err:
        await v1.replace_namespaced_pod_status("p", "default", current)
    assert err.value.status == 500
    await v1.replace_namespaced_pod("p", "default", current)


async def test_drop_watches_eof_and_reset(kubesim: KubeSim, http: aiohttp.ClientSession):
    url = "/api/v1/pods?watch=true&resourceVersion=" + str(kubesim.store.resource_version)
    async with http.get(url) as resp:
        while kubesim.stats.open_watches == 0:
            await asyncio.sleep(0.01)
        assert kubesim.drop_watches("eof") == 1
        async with asyncio.timeout(10):
            assert await resp.content.read() == b""
    async with http.get(url) as resp:
        while kubesim.stats.open_watches == 0:
            await asyncio.sleep(0.01)
        assert kubesim.drop_watches("reset") == 1
        with pytest.raises(aiohttp.ClientPayloadError):
            async with asyncio.timeout(10):
                await resp.content.read()
    assert kubesim.stats.open_watches == 0


async def test_expire_next_watch(kubesim: KubeSim, http: aiohttp.ClientSession):
    kubesim.expire_next_watches(1)
    rv = kubesim.store.resource_version
    async with http.get(f"/api/v1/pods?watch=1&resourceVersion={rv}") as resp:
        assert resp.status == 200
        events = await watch_events(resp, 2)
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    assert events[0]["object"]["reason"] == "Expired"
    # Only the next one: the retry works.
    kubesim.create(pod("p"))
    async with http.get(f"/api/v1/pods?watch=1&resourceVersion={rv}") as resp:
        events = await watch_events(resp, 1)
    assert events[0]["type"] == "ADDED"


async def test_hidden_pod_is_missing_from_list_and_watch_but_gettable(
    kubesim: KubeSim, api_client: client.ApiClient, http: aiohttp.ClientSession
):
    v1 = client.CoreV1Api(api_client)
    kubesim.faults.hide("default", "static-web")
    kubesim.create(pod("static-web"))
    kubesim.create(pod("other"))
    listed = await v1.list_pod_for_all_namespaces()
    assert [p.metadata.name for p in listed.items] == ["other"]
    got = await v1.read_namespaced_pod("static-web", "default")
    assert got.metadata.name == "static-web"
    async with http.get("/api/v1/pods?watch=true") as resp:
        kubesim.patch("pods", "default", "static-web", {"metadata": {"labels": {"a": "b"}}})
        kubesim.patch("pods", "default", "other", {"metadata": {"labels": {"a": "b"}}})
        events = await watch_events(resp, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "other"), ("MODIFIED", "other"),
    ]  # fmt: skip
    kubesim.faults.unhide("default", "static-web")
    listed = await v1.list_pod_for_all_namespaces()
    assert sorted(p.metadata.name for p in listed.items) == ["other", "static-web"]


async def test_stalled_watches_deliver_after_unstall(kubesim: KubeSim, http: aiohttp.ClientSession):
    rv = kubesim.store.resource_version
    kubesim.faults.set_stall(True)
    async with http.get(f"/api/v1/pods?watch=1&resourceVersion={rv}") as resp:
        kubesim.create(pod("p"))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await resp.content.readline()
        kubesim.faults.set_stall(False)
        events = await watch_events(resp, 1)
    assert events[0]["object"]["metadata"]["name"] == "p"


async def test_control_api_over_http(kubesim: KubeSim, control: ControlClient):
    await control.add_error(code=500, verb="list", resource="pods", count=2)
    await control.add_latency(seconds=0.01, verb="get")
    await control.hide("default", "p1")
    await control.expire_next_watches(2)
    doc = await control.faults()
    assert doc["errors"][0]["count"] == 2
    assert doc["latency"][0]["seconds"] == 0.01
    assert doc["hidden"] == [{"namespace": "default", "name": "p1", "resource": "pods"}]
    assert doc["expire_next_watches"] == 2
    assert kubesim.faults.errors[0].code == 500

    await control.update_faults({"stall_watches": True})
    assert kubesim.faults.stall_watches is True
    await control.clear_faults()
    assert kubesim.faults.to_dict()["errors"] == []
    assert kubesim.faults.stall_watches is False

    applied = await control.seed(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: s1, namespace: fresh}\nspec: {}\n"
    )
    assert applied == ["namespace/fresh created", "pod/s1 created"]
    assert kubesim.get("pods", "fresh", "s1")["metadata"]["namespace"] == "fresh"

    rv = await control.compact()
    assert rv == kubesim.store.resource_version == kubesim.store.compacted
    assert await control.drop_watches() == 0

    stats = await control.stats(log=5)
    assert stats["openWatches"] == 0
    assert len(stats["log"]) <= 5
    await control.reset_stats()
    assert kubesim.stats.count() == 0


async def test_unauthenticated_over_tls_is_401(kubesim_tls: KubeSim):
    ssl_ctx = kubesim_tls.tls.client_context() if kubesim_tls.tls else None
    async with aiohttp.ClientSession() as session:
        async with session.get(kubesim_tls.url + "/api/v1/pods", ssl=ssl_ctx) as resp:
            assert resp.status == 401
            assert (await resp.json())["reason"] == "Unauthorized"
        headers = {"Authorization": "Bearer wrong"}
        async with session.get(kubesim_tls.url + "/api/v1/pods", ssl=ssl_ctx, headers=headers) as r:
            assert r.status == 401
        async with session.get(kubesim_tls.url + "/version", ssl=ssl_ctx) as resp:
            assert resp.status == 200


async def test_client_going_away_ends_its_watch(kubesim: KubeSim):
    headers = {"Authorization": f"Bearer {kubesim.token}"}
    async with aiohttp.ClientSession(kubesim.url, headers=headers) as session:
        resp = await session.get("/api/v1/pods?watch=true")
        while kubesim.stats.open_watches == 0:
            await asyncio.sleep(0.01)
        resp.close()
    async with asyncio.timeout(10):
        while kubesim.stats.open_watches or kubesim.store.statistics().watchers:
            await asyncio.sleep(0.01)


async def test_stop_ends_open_watches():
    sim = KubeSim()
    await sim.start()
    async with (
        aiohttp.ClientSession(sim.url) as session,
        session.get("/api/v1/pods?watch=true") as resp,
    ):
        while sim.stats.open_watches == 0:
            await asyncio.sleep(0.01)
        async with asyncio.timeout(10):
            await sim.stop()
            assert await resp.content.read() == b""


async def test_content_negotiation(kubesim: KubeSim, http: aiohttp.ClientSession):
    """Built-in kinds answer protobuf when it is listed first; custom resources have no
    protobuf form (406 when nothing else is acceptable), and take no protobuf bodies (415)."""
    proto_first = {"Accept": "application/vnd.kubernetes.protobuf, application/json"}
    async with http.get("/api/v1/namespaces/default", headers=proto_first) as resp:
        assert resp.status == 200
        assert resp.content_type == "application/vnd.kubernetes.protobuf"
        assert protobuf.unwrap(await resp.read())[:2] == ("v1", "Namespace")
    only_proto = {"Accept": "application/vnd.kubernetes.protobuf"}
    nads = "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions"
    async with http.get(nads, headers=proto_first) as resp:
        assert resp.content_type == "application/json"
    async with http.get(nads, headers=only_proto) as resp:
        assert resp.status == 406
        assert (await resp.json())["reason"] == "NotAcceptable"
    body = b"\x6b\x38\x73\x00"
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    async with http.post(nads, data=body, headers=headers) as resp:
        assert resp.status == 415
        assert (await resp.json())["message"].endswith(
            "accepted media types include: application/json "
            "(got 'application/vnd.kubernetes.protobuf')"
        )
    async with http.post("/api/v1/namespaces/default/pods", data=body, headers=headers) as resp:
        assert resp.status == 400
        assert (await resp.json())["message"] == (
            "the object provided is unrecognized (must be of type Pod): empty body (6b387300)"
        )
    text = {"Content-Type": "text/plain"}
    async with http.post("/api/v1/namespaces/default/pods", data=b"x", headers=text) as resp:
        assert resp.status == 415
        assert (await resp.json())["message"] == (
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json, application/vnd.kubernetes.protobuf (got 'text/plain')"
        )


async def test_send_initial_events_ends_with_marked_bookmark(
    kubesim: KubeSim, http: aiohttp.ClientSession
):
    kubesim.create(pod("p"))
    url = (
        "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true"
        "&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
    )
    async with http.get(url) as resp:
        events = await watch_events(resp, 2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    bookmark = events[1]["object"]["metadata"]
    assert bookmark["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert bookmark["resourceVersion"] == str(kubesim.store.resource_version)


async def test_drop_while_stalled_ends_the_stream(kubesim: KubeSim, http: aiohttp.ClientSession):
    kubesim.faults.set_stall(True)
    async with http.get("/api/v1/pods?watch=1") as resp:
        while kubesim.stats.open_watches == 0:
            await asyncio.sleep(0.01)
        kubesim.drop_watches("eof")
        async with asyncio.timeout(10):
            await resp.content.read()
    assert kubesim.stats.open_watches == 0
