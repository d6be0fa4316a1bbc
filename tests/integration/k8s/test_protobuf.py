"""Pods over Kubernetes protobuf: the client against the emulator, and the whole reflector
suite again with protobuf negotiated.

The reflector's own tests (``test_reflector.py``) are loaded from their file and collected
here a second time, with this module's ``client`` fixture: the same list, watch, bookmark,
410-relist and fault scenarios, with every pod read going over protobuf.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import aiohttp.web
import pytest

from multusd import protobuf
from multusd.k8s import kproto
from multusd.k8s.apiconfig import ApiConfig, load_api_config
from multusd.k8s.client import ClientSettings, KubeClient
from multusd.k8s.errors import NotFound, TooManyRequests, TransportError
from multusd.k8s.reflector.base import ReflectorSettings
from multusd.k8s.reflector.loop import Reflector
from multusd.k8s.store import Store, trim_pod
from multusd.kubesim import ErrorRule, KubeSim, Settings
from tests.waits import eventually


def _load_reflector_suite() -> ModuleType:
    path = Path(__file__).with_name("test_reflector.py")
    spec = importlib.util.spec_from_file_location("_reflector_suite_protobuf", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_suite = _load_reflector_suite()
# Every reflector test, collected again here (and so run with the protobuf ``client`` below).
globals().update({name: obj for name, obj in vars(_suite).items() if name.startswith("test_")})

PODS = "/api/v1/pods"
NADS = "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"
NODE = "node1"
PROTOBUF_SETTINGS = ClientSettings(request_timeout=10.0, protobuf_pods=True)
FAST = ReflectorSettings(
    page_size=7, watch_timeout=(2.0, 3.0), inactivity_timeout=1.5, backoff=(0.05, 0.4)
)


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    async with KubeSim(Settings(bookmark_interval=0.3)) as emulator:
        yield emulator


async def _client(sim: KubeSim, tmp: Path, settings: ClientSettings) -> KubeClient:
    kubeconfig = await sim.write_kubeconfig(tmp / "kubeconfig")
    return KubeClient(await load_api_config(str(kubeconfig), environ={}), settings)


@pytest.fixture
async def client(sim: KubeSim, short_tmp: Path) -> AsyncIterator[KubeClient]:
    async with await _client(sim, short_tmp, PROTOBUF_SETTINGS) as api:
        yield api


@pytest.fixture
async def json_client(sim: KubeSim, short_tmp: Path) -> AsyncIterator[KubeClient]:
    async with await _client(
        sim, short_tmp, ClientSettings(request_timeout=10.0, protobuf_pods=False)
    ) as api:
        yield api


@pytest.fixture(autouse=True)
def _pod_reads_went_over_protobuf(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test whose only client is the protobuf one: every pod read asked for
    protobuf first, and every one that succeeded was answered in it."""
    names = request.fixturenames
    checked = "client" in names and "sim" in names and "json_client" not in names
    emulator: KubeSim | None = request.getfixturevalue("sim") if checked else None
    yield
    if emulator is None:
        return
    reads = [
        r
        for r in emulator.stats.requests()
        if r.resource == "pods" and not r.subresource and r.verb in ("get", "list", "watch")
    ]
    assert all(r.accept.startswith(protobuf.MEDIA_TYPE) for r in reads)
    answered = [r for r in reads if r.content_type and r.code < 400]
    assert all(r.content_type.startswith(protobuf.MEDIA_TYPE) for r in answered), answered
    assert answered or not any(r.code == 200 for r in reads)


def pod(name: str, node: str = NODE, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": "x"},
            "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan", **annotations},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }


async def _sync(reflector: Reflector) -> asyncio.Task[None]:
    task = asyncio.create_task(reflector.run())
    async with asyncio.timeout(10):
        await reflector.store.synced.wait()
    return task


async def _stop(*tasks: asyncio.Task[None]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _pod_requests(sim: KubeSim, verb: str) -> list[Any]:
    return [r for r in sim.stats.requests() if r.verb == verb and r.resource == "pods"]


async def test_protobuf_store_equals_the_json_store(
    sim: KubeSim, client: KubeClient, json_client: KubeClient
) -> None:
    """Two reflectors, one per encoding, through a list in pages, live events, a bookmark,
    an expired watch (410 → relist) and deletes: both caches hold the same dicts."""
    for i in range(20):
        sim.create(pod(f"p{i}", node=NODE if i % 2 else "node2", i=str(i)))
    pb_store, json_store = Store(), Store()
    pb = Reflector(client, PODS, pb_store, trim=trim_pod, settings=FAST)
    js = Reflector(json_client, PODS, json_store, trim=trim_pod, settings=FAST, name="json")
    tasks = [await _sync(pb), await _sync(js)]
    try:
        assert pb_store.items() and sorted(pb_store.items(), key=str) == sorted(
            json_store.items(), key=str
        )
        bookmarks = pb.statistics().bookmarks, js.statistics().bookmarks
        for i in range(10):
            sim.patch("pods", "default", f"p{i}", {"metadata": {"annotations": {"n": str(i)}}})
            sim.create(pod(f"late{i}"))
        sim.delete("pods", "default", "p3")

        def watched(reflector: Reflector, store: Store, before: int) -> bool:
            """The live events came in by the watch, and a bookmark since they were made (one
            every 0.3 s)."""
            return (
                store.get("default", "late9") is not None
                and store.get("default", "p3") is None
                and reflector.statistics().bookmarks > before
            )

        await eventually(
            lambda: watched(pb, pb_store, bookmarks[0]) and watched(js, json_store, bookmarks[1])
        )
        sim.compact()
        sim.expire_next_watches(2)
        sim.drop_watches()
        sim.create(pod("after-relist"))
        await eventually(
            lambda: (
                pb.statistics().relists_410 > 0
                and js.statistics().relists_410 > 0
                and pb_store.get("default", "after-relist") is not None
                and json_store.get("default", "after-relist") is not None
            ),
            10,
            what="both reflectors relisted after the 410, with the pod made since",
        )
        expected = {str(o["metadata"]["name"]): trim_pod(o) for o in _all_pods(sim)}
        assert {o["metadata"]["name"]: o for o in pb_store.items()} == expected
        assert {o["metadata"]["name"]: o for o in json_store.items()} == expected
        assert pb.statistics().bookmarks > 0 and pb.statistics().lists >= 2
        assert pb_store.resource_version == json_store.resource_version
    finally:
        await _stop(*tasks)

    # The request log shows what each client negotiated.
    for verb in ("list", "watch"):
        requests = _pod_requests(sim, verb)
        pb_requests = [r for r in requests if r.accept.startswith(protobuf.MEDIA_TYPE)]
        json_requests = [r for r in requests if r not in pb_requests]
        assert pb_requests and json_requests
        expected_type = protobuf.STREAM_MEDIA_TYPE if verb == "watch" else protobuf.MEDIA_TYPE
        assert {r.content_type for r in pb_requests} == {expected_type}
        assert {r.content_type for r in json_requests} == {"application/json"}


def _all_pods(sim: KubeSim) -> list[dict[str, Any]]:
    rt = sim.state.registry.by_path("", "v1", "pods")
    assert rt is not None
    return [sim.get("pods", e.namespace, e.name) for e in sim.store.iter_entries(rt)]


async def test_get_and_list_over_protobuf(sim: KubeSim, client: KubeClient) -> None:
    created = sim.create(pod("one", note="ü ✓"))
    got = await client.get("/api/v1/namespaces/default/pods/one")
    assert got == trim_pod(created)
    listing = await client.get(PODS, {"limit": "1"})
    assert listing["items"] == [trim_pod(created)]
    assert listing["metadata"]["resourceVersion"]
    (request,) = _pod_requests(sim, "get")
    assert request.content_type == protobuf.MEDIA_TYPE
    with pytest.raises(NotFound):
        await client.get("/api/v1/namespaces/default/pods/missing")


async def test_nads_and_writes_stay_json(sim: KubeSim, client: KubeClient) -> None:
    """CRDs have no protobuf form; the client only asks for it on pod reads."""
    sim.create(
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "macvlan", "namespace": "default"},
            "spec": {"config": "{}"},
        }
    )
    nads = await client.get(NADS)
    assert [n["metadata"]["name"] for n in nads["items"]] == ["macvlan"]
    sim.create(pod("w"))
    patched = await client.patch_pod_status("default", "w", {"metadata": {"labels": {"a": "b"}}})
    assert patched["metadata"]["labels"] == {"app": "x", "a": "b"}  # the full JSON object
    for record in sim.stats.requests():
        if record.resource == "network-attachment-definitions" or record.verb == "patch":
            assert record.content_type.startswith("application/json")
            assert not record.accept.startswith(protobuf.MEDIA_TYPE)


async def test_emulator_negotiation(sim: KubeSim) -> None:
    """What a real apiserver does with Accept: protobuf for pods when listed first, JSON when
    JSON comes first, protobuf-only for a CRD is 406."""
    sim.create(pod("neg"))
    async with aiohttp.ClientSession() as http:
        url = f"{sim.url}/api/v1/namespaces/default/pods/neg"
        async with http.get(url, headers={"Accept": protobuf.MEDIA_TYPE}) as resp:
            assert resp.content_type == protobuf.MEDIA_TYPE
            assert kproto.decode_pod(await resp.read())["metadata"]["name"] == "neg"
        both = f"application/json, {protobuf.MEDIA_TYPE}"
        async with http.get(url, headers={"Accept": both}) as resp:
            assert resp.content_type == "application/json"
        async with http.get(f"{sim.url}{NADS}", headers={"Accept": protobuf.MEDIA_TYPE}) as resp:
            assert resp.status == 406
        # A failed pod read that asked for protobuf gets its Status in protobuf.
        async with http.get(url + "x", headers={"Accept": protobuf.MEDIA_TYPE}) as resp:
            assert resp.status == 404
            assert resp.content_type == protobuf.MEDIA_TYPE
            status = kproto.decode_status(await resp.read())
        assert (status["code"], status["reason"]) == (404, "NotFound")
        assert status["details"] == {"name": "negx", "kind": "pods"}


async def test_protobuf_error_statuses_become_typed_errors(
    sim: KubeSim, client: KubeClient
) -> None:
    sim.faults.errors.append(ErrorRule(429, verb="get", resource="pods", count=1, retry_after=3))
    with pytest.raises(TooManyRequests) as caught:
        await client.get("/api/v1/namespaces/default/pods/any")
    assert caught.value.retry_after == 3
    (record,) = _pod_requests(sim, "get")
    assert record.content_type == protobuf.MEDIA_TYPE  # the Status came in protobuf


class _GarbledProtobufServer:
    """An API server whose protobuf pod bodies our decoder cannot read (what a future or broken
    server could send) and whose JSON is fine: the client must fall back, not fail."""

    def __init__(self) -> None:
        self.accepts: list[tuple[str, str]] = []  # (path, Accept) of each request
        self.url = ""
        self._runner: aiohttp.web.AppRunner | None = None

    async def _pod(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        accept = request.headers.get("Accept", "")
        self.accepts.append((request.path, accept))
        if accept.startswith(protobuf.MEDIA_TYPE):
            # The magic, then a runtime.Unknown whose raw field claims more bytes than follow.
            return aiohttp.web.Response(
                body=b"k8s\x00\x12\x7f\x01", content_type=protobuf.MEDIA_TYPE
            )
        return aiohttp.web.json_response(pod("garbled"))

    async def _watch(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        accept = request.headers.get("Accept", "")
        self.accepts.append((request.path, accept))
        resp = aiohttp.web.StreamResponse()
        if accept.startswith(protobuf.MEDIA_TYPE):
            resp.content_type = protobuf.MEDIA_TYPE
            await resp.prepare(request)
            await resp.write(b"\x00\x00\x00\x03\xff\xff\xff")  # a frame that is no WatchEvent
            return resp
        resp.content_type = "application/json"
        await resp.prepare(request)
        await resp.write(b'{"type":"ADDED","object":{"metadata":{"name":"garbled"}}}\n')
        return resp

    async def __aenter__(self) -> _GarbledProtobufServer:
        app = aiohttp.web.Application()
        app.router.add_get("/api/v1/namespaces/default/pods/garbled", self._pod)
        app.router.add_get("/api/v1/pods", self._watch)
        self._runner = aiohttp.web.AppRunner(app)
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


async def test_undecodable_protobuf_turns_protobuf_off_and_the_get_is_repeated_as_json(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _GarbledProtobufServer() as server:
        config = ApiConfig.for_server(server.url)
        async with KubeClient(config, ClientSettings(request_timeout=10.0)) as api:
            got = await api.get("/api/v1/namespaces/default/pods/garbled")
            assert got["metadata"]["name"] == "garbled"
            await api.get("/api/v1/namespaces/default/pods/garbled")
    accepts = [accept for _, accept in server.accepts]
    assert accepts[0].startswith(protobuf.MEDIA_TYPE)
    assert all(a == "application/json" for a in accepts[1:]) and len(accepts) == 3
    warnings = [r for r in caplog.records if "reading pods as JSON" in r.getMessage()]
    assert len(warnings) == 1


async def test_undecodable_protobuf_watch_ends_and_the_next_watch_asks_for_json() -> None:
    async with _GarbledProtobufServer() as server:
        config = ApiConfig.for_server(server.url)
        async with KubeClient(config, ClientSettings(request_timeout=10.0)) as api:
            with pytest.raises(TransportError, match="undecodable watch event"):
                async with api.watch("/api/v1/pods", {}) as events:
                    async for _ in events:
                        pass
            async with api.watch("/api/v1/pods", {}) as events:
                first = await anext(aiter(events))
    assert first["object"]["metadata"]["name"] == "garbled"
    assert [accept.startswith(protobuf.MEDIA_TYPE) for _, accept in server.accepts] == [True, False]
