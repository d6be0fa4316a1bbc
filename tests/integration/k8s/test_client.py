"""KubeClient against the in-process API emulator: every config mode, TLS, error mapping, watch
events, timeouts, and the token bucket's bound measured from the emulator's own request log."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from multusd import __version__
from multusd.k8s.client import ApiConfig, ClientSettings, KubeClient, load_api_config
from multusd.k8s.errors import (
    ApiError,
    Conflict,
    Gone,
    NotFound,
    ServerError,
    TooManyRequests,
    TransportError,
    is_transient,
)
from multusd.kubesim import ErrorRule, KubeSim, LatencyRule, Settings
from tests.waits import eventually

SIM_SETTINGS = Settings(bookmark_interval=0.3)
PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "n1"}}


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    async with KubeSim(SIM_SETTINGS) as s:
        yield s


@pytest.fixture
async def sim_tls() -> AsyncIterator[KubeSim]:
    async with KubeSim(SIM_SETTINGS, tls_enabled=True) as s:
        yield s


@pytest.fixture
async def client(sim: KubeSim, short_tmp: Path) -> AsyncIterator[KubeClient]:
    cfg = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "kubeconfig")), {})
    async with KubeClient(cfg) as c:
        yield c


# --- configuration modes -----------------------------------------------------------------------


async def test_plain_http_kubeconfig_verbs(sim: KubeSim, client: KubeClient) -> None:
    assert client.config.source.startswith("kubeconfig ")
    created = await client.post(PODS, pod("p1"))
    assert created["metadata"]["uid"]
    got = await client.get(f"{PODS}/p1")
    assert got["metadata"]["name"] == "p1"
    patched = await client.patch_pod_status(
        "default", "p1", {"metadata": {"annotations": {"a": "1"}}}
    )
    assert patched["metadata"]["annotations"] == {"a": "1"}
    listed = await client.get("/api/v1/pods", {"fieldSelector": "spec.nodeName=n1", "limit": "5"})
    assert [p["metadata"]["name"] for p in listed["items"]] == ["p1"]
    agents = {r.user_agent for r in sim.stats.requests()}
    assert agents == {f"multusd/{__version__}"}
    assert sim.stats.count("patch", "pods") == 1


async def test_tls_kubeconfig_verifies_ca_and_sends_token(
    sim_tls: KubeSim, short_tmp: Path
) -> None:
    path = await sim_tls.write_kubeconfig(short_tmp / "kubeconfig")
    cfg = await load_api_config(str(path), {})
    assert cfg.server.startswith("https://") and cfg.configuration.ssl_ca_cert
    sim_tls.create(pod("p"))
    async with KubeClient(cfg) as c:
        assert (await c.get(f"{PODS}/p"))["metadata"]["name"] == "p"
    # No token: the emulator (like an apiserver) refuses; not worth retrying.
    no_token = ApiConfig.for_server(cfg.server, ca_file=cfg.configuration.ssl_ca_cert)
    async with KubeClient(no_token) as c:
        with pytest.raises(ApiError) as info:
            await c.get(f"{PODS}/p")
        assert info.value.status == 401 and not is_transient(info.value)
    # The system trust store does not know the emulator's CA: a TLS failure, status 0.
    untrusted = ApiConfig.for_server(cfg.server, token=sim_tls.token)
    async with KubeClient(untrusted) as c:
        with pytest.raises(TransportError) as terr:
            await c.get(f"{PODS}/p")
        assert terr.value.status == 0
        assert c.statistics().statuses == {0: 1}


async def test_incluster_files_and_env_with_tls(sim_tls: KubeSim, short_tmp: Path) -> None:
    sa = await sim_tls.write_incluster(short_tmp / "sa", namespace="kube-system")
    cfg = await load_api_config("", sim_tls.incluster_env(), incluster_dir=str(sa))
    assert cfg.source == "in-cluster"
    assert cfg.token is not None and cfg.token.path == str(sa / "token")
    async with KubeClient(cfg) as c:
        body = await c.get("/api/v1/namespaces")
        assert "kube-system" in {ns["metadata"]["name"] for ns in body["items"]}


async def test_a_rotated_token_is_read_at_the_first_401(sim_tls: KubeSim, short_tmp: Path) -> None:
    """client-go's rule: a 401 re-reads the token file and the request goes again with the new
    token, so a rotation fails no request (the minute between the file's periodic reads
    included); a file that still holds a refused token gets the 401 through."""
    sa = await sim_tls.write_incluster(short_tmp / "sa")
    cfg = await load_api_config("", sim_tls.incluster_env(), incluster_dir=str(sa))
    async with KubeClient(cfg) as c:
        await c.get("/api/v1/namespaces/default")
        sim_tls.state.rotate_token("rotated")
        (sa / "token").write_text("rotated\n")
        await c.get("/api/v1/namespaces/default")  # 401, read again, sent again: answered
        assert c.statistics().token_reloads == 1
        assert c.statistics().statuses == {200: 2, 401: 1}
        sim_tls.state.rotate_token("refused-elsewhere")
        (sa / "token").write_text("still-wrong")
        with pytest.raises(ApiError) as info:
            await c.get("/api/v1/namespaces/default")
        assert info.value.status == 401
        assert c.statistics().token_reloads == 2  # read again, sent again, refused again


# --- errors ------------------------------------------------------------------------------------


async def test_error_mapping(sim: KubeSim, client: KubeClient) -> None:
    with pytest.raises(NotFound) as nf:
        await client.get(f"{PODS}/missing")
    assert nf.value.reason == "NotFound" and 'pods "missing" not found' in nf.value.message

    await client.post(PODS, pod("dup"))
    with pytest.raises(Conflict) as conflict:
        await client.post(PODS, pod("dup"))
    assert conflict.value.reason == "AlreadyExists"

    sim.faults.errors.append(ErrorRule(code=410, verb="list", count=1))
    with pytest.raises(Gone):
        await client.get(PODS)

    sim.faults.errors.append(ErrorRule(code=429, verb="get", count=1, retry_after=3))
    with pytest.raises(TooManyRequests) as tmr:
        await client.get(f"{PODS}/dup")
    assert tmr.value.retry_after == 3.0 and is_transient(tmr.value)

    sim.faults.errors.append(ErrorRule(code=500, verb="patch", count=1))
    with pytest.raises(ServerError) as se:
        await client.patch_pod_status("default", "dup", {"metadata": {"labels": {"x": "y"}}})
    assert se.value.status == 500 and is_transient(se.value)

    sim.faults.errors.append(ErrorRule(code=503, verb="get", count=1, retry_after=2))
    with pytest.raises(ServerError) as unavailable:
        await client.get(f"{PODS}/dup")
    assert unavailable.value.retry_after == 2.0

    stats = client.statistics()
    assert stats.statuses == {404: 1, 201: 1, 409: 1, 410: 1, 429: 1, 500: 1, 503: 1}
    assert stats.requests == {("get", "pods"): 3, ("create", "pods"): 2, ("list", "pods"): 1,
                              ("patch", "pods/status"): 1}  # fmt: skip
    assert stats.bucket.acquired == 7


async def test_transport_errors(sim: KubeSim, client: KubeClient) -> None:
    sim.faults.latency.append(LatencyRule(seconds=2.0, verb="get"))
    with pytest.raises(TransportError) as slow:
        await client.get(f"{PODS}/anything", timeout=0.2)
    assert "timed out" in str(slow.value)
    sim.faults.latency.clear()

    port = sim.port
    await sim.stop()
    with pytest.raises(TransportError):
        await client.get(f"{PODS}/anything")
    refused = ApiConfig.for_server(f"http://127.0.0.1:{port}")
    async with KubeClient(refused) as c:
        with pytest.raises(TransportError) as info:
            await c.get("/api/v1/pods")
        assert isinstance(info.value.__cause__, OSError)


async def test_use_outside_context_is_a_programming_error(sim: KubeSim, short_tmp: Path) -> None:
    cfg = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "k")), {})
    with pytest.raises(RuntimeError):
        await KubeClient(cfg).get("/api/v1/pods")


# --- watches -----------------------------------------------------------------------------------


async def test_watch_events_and_bookmarks(sim: KubeSim, client: KubeClient) -> None:
    listed = await client.get(PODS)
    rv = listed["metadata"]["resourceVersion"]
    params = {"resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "30"}
    seen: list[tuple[str, str]] = []
    async with asyncio.timeout(10):
        async with client.watch(PODS, params) as events:
            assert client.statistics().watches_open == 1
            sim.create(pod("w1"))
            sim.patch("pods", "default", "w1", {"metadata": {"labels": {"a": "b"}}})
            sim.delete("pods", "default", "w1")
            async for event in events:
                name = event["object"]["metadata"].get("name", "")
                seen.append((event["type"], name))
                if event["type"] == "BOOKMARK":
                    assert event["object"]["metadata"]["resourceVersion"]
                    break
    assert seen[:3] == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
    assert seen[-1][0] == "BOOKMARK"
    stats = client.statistics()
    assert stats.watches_open == 0
    assert stats.requests[("watch", "pods")] == 1
    assert sim.stats.count("watch", "pods") == 1


async def test_watch_large_object_in_one_event(sim: KubeSim, client: KubeClient) -> None:
    """Events bigger than aiohttp's line buffer (a pod with a 200 kB annotation: more than
    256 KiB of them the API server refuses) still decode."""
    rv = (await client.get(PODS))["metadata"]["resourceVersion"]
    big = "x" * 200_000
    async with asyncio.timeout(10), client.watch(PODS, {"resourceVersion": rv}) as events:
        sim.create(pod("big", note=big))
        event = await anext(aiter(events))
    assert event["object"]["metadata"]["annotations"]["note"] == big


async def test_watch_410_error_event_raises_gone(sim: KubeSim, client: KubeClient) -> None:
    sim.expire_next_watches(1)
    async with asyncio.timeout(10), client.watch(PODS, {"resourceVersion": "1"}) as events:
        with pytest.raises(Gone) as info:
            async for _ in events:
                pass
    assert info.value.status == 410 and info.value.reason == "Expired"


async def test_watch_http_errors_and_clean_end(sim: KubeSim, client: KubeClient) -> None:
    sim.faults.errors.append(ErrorRule(code=500, verb="watch", count=1))
    with pytest.raises(ServerError):
        async with client.watch(PODS, {}):
            pytest.fail("a failed watch must not yield")
    # timeoutSeconds elapses: the stream just ends.
    async with asyncio.timeout(10), client.watch(PODS, {"timeoutSeconds": "1"}) as events:
        assert [e async for e in events if e["type"] != "BOOKMARK"] == []
    # The server resets the connection mid-stream: a transport error, worth retrying.
    async with asyncio.timeout(10), client.watch(PODS, {}) as events:
        await eventually(lambda: sim.stats.open_watches == 1)  # the server has it, to reset
        sim.drop_watches("reset")
        with pytest.raises(TransportError):
            async for _ in events:
                pass


async def test_silent_watch_hits_the_read_timeout(sim: KubeSim, short_tmp: Path) -> None:
    cfg = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "k")), {})
    sim.faults.set_stall(True)
    try:
        async with KubeClient(cfg, ClientSettings(watch_read_timeout=0.5)) as c:
            params = {"allowWatchBookmarks": "true"}
            async with asyncio.timeout(10), c.watch(PODS, params) as events:
                with pytest.raises(TransportError) as info:
                    async for _ in events:
                        pass
            assert "timed out" in str(info.value)
    finally:
        sim.faults.set_stall(False)


# --- the token bucket --------------------------------------------------------------------------


async def test_bucket_bound_from_the_request_log(sim: KubeSim, short_tmp: Path) -> None:
    """qps=20, burst=5, 60 concurrent requests: by any time t after the start (the bucket full
    then), the emulator has received at most burst + qps*(t - start) of them.

    Windows anchored at the start, not between two arrivals: a request reaches the emulator
    only after the bucket granted it, so a loaded machine can only delay arrivals, which keeps
    this bound; between two arrivals, delayed requests arriving together could pass it while
    the bucket did its job (the emulator runs on the same loop)."""
    sim.create(pod("p"))
    cfg = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "k")), {})
    qps, burst, n = 20.0, 5, 60
    async with KubeClient(cfg, ClientSettings(qps=qps, burst=burst)) as c:
        sim.stats.reset()
        start = time.monotonic()  # the clock of the emulator's request log
        async with asyncio.timeout(30):
            await asyncio.gather(*(c.get(f"{PODS}/p") for _ in range(n)))
        stats = c.statistics()
    arrivals = sorted(r.started for r in sim.stats.requests() if r.verb == "get")
    assert len(arrivals) == n
    rounding = 0.005  # the bucket's refill and the two clock reads
    for count, arrived in enumerate(arrivals, start=1):
        assert count <= burst + qps * (arrived - start + rounding), (count, arrived - start)
    assert arrivals[-1] - start >= (n - burst) / qps - rounding  # 2.75 s at the earliest
    assert stats.bucket.acquired == n
    assert stats.bucket.waiting == 0
    assert stats.bucket.max_wait > 0
    assert stats.bucket.total_wait > stats.bucket.max_wait
    assert stats.statuses == {200: n}


async def test_watch_starts_take_a_token(
    sim: KubeSim, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="multusd.k8s.apiclient")
    cfg = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "k")), {})
    async with KubeClient(cfg, ClientSettings(qps=1.0, burst=1)) as c:
        await c.get(PODS)
        assert not c.bucket.acquire_nowait()  # the list took the only token
        started = asyncio.get_running_loop().time()
        async with asyncio.timeout(10), c.watch(PODS, {"timeoutSeconds": "1"}) as events:
            waited = asyncio.get_running_loop().time() - started
            async for _ in events:
                pass
        assert waited > 0.5
        assert c.statistics().bucket.max_wait > 0.5
    assert any("rate limit: watch pods" in r.getMessage() for r in caplog.records)
