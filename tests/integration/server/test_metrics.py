"""``/metrics`` over real TCP: upstream's counter, our histograms and scrape-time gauges."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from multusd import timeline
from multusd.metrics import HEADER_TIMEOUT, SHUTDOWN_TIMEOUT, Metrics, Recorder
from multusd.server.app import api_middlewares
from multusd.server.runner import runner_options

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Cache:
    size: int
    synced: bool


@dataclass(frozen=True)
class Bucket:
    tokens: float
    waiting: int


async def scrape(port: int) -> tuple[str, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{HOST}:{port}/metrics") as response,
    ):
        assert response.status == 200
        return response.headers["Content-Type"], await response.text()


def samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(found: list[Sample], name: str, **labels: str) -> float:
    matches = [s.value for s in found if s.name == name and s.labels == labels]
    assert len(matches) == 1, (name, labels, [s for s in found if s.name == name])
    return matches[0]


async def test_scrape_reports_requests_phases_and_state() -> None:
    in_flight = [3]
    caches = {"pods": Cache(7, True)}
    metrics = Metrics(in_flight=lambda: in_flight[0], caches={"pods": lambda: caches["pods"]})
    metrics.watch_cache("nads", lambda: Cache(0, False))
    metrics.watch_bucket(lambda: Bucket(tokens=12.5, waiting=2))

    metrics.count_request("/cni", "POST", 200)
    metrics.count_request("/cni", "POST", 200)
    metrics.count_request("/readyz", "GET", 500)
    metrics.observe_command("ADD", 0.2, ok=True)
    metrics.observe_command("DEL", 3.0, ok=False)
    metrics.observe_phase("pod_lookup", 0.004)
    outer = time.monotonic()
    with metrics.phase("delegate", plugin="macvlan"):
        inner = time.monotonic()
        await asyncio.sleep(0.01)  # the delegate's work: the phase times across its awaits
        inner = time.monotonic() - inner
    outer = time.monotonic() - outer
    with pytest.raises(RuntimeError), metrics.phase("status_write"):
        raise RuntimeError("failed phases count too")
    metrics.observe_bucket_wait(0.03)

    async with metrics.serve(0, host=HOST) as port:
        content_type, text = await scrape(port)
        in_flight[0] = 0
        caches["pods"] = Cache(8, True)
        _, again = await scrape(port)

    assert content_type.startswith("text/plain")
    found = samples(text)
    total = "multus_server_request_total"
    assert value(found, total, handler="/cni", code="200", method="post") == 2
    assert value(found, total, handler="/readyz", code="500", method="get") == 1
    assert "# HELP multus_server_request_total Counter of HTTP requests" in text

    latency = "multus_cni_request_duration_seconds"
    assert value(found, latency + "_count", command="ADD", result="ok") == 1
    assert value(found, latency + "_sum", command="ADD", result="ok") == pytest.approx(0.2)
    assert value(found, latency + "_bucket", command="ADD", result="ok", le="0.1") == 0
    assert value(found, latency + "_bucket", command="ADD", result="ok", le="0.25") == 1
    assert value(found, latency + "_count", command="DEL", result="error") == 1

    phase = "multus_cni_phase_duration_seconds"
    assert value(found, phase + "_count", phase="pod_lookup", plugin="") == 1
    assert value(found, phase + "_count", phase="delegate", plugin="macvlan") == 1
    assert inner <= value(found, phase + "_sum", phase="delegate", plugin="macvlan") <= outer
    assert value(found, phase + "_count", phase="status_write", plugin="") == 1

    wait = "multus_k8s_rate_limiter_wait_seconds"
    assert value(found, wait + "_count") == 1
    assert value(found, wait + "_sum") == pytest.approx(0.03)
    assert value(found, "multus_k8s_rate_limiter_waiting") == 2
    assert value(found, "multus_k8s_rate_limiter_tokens") == 12.5

    assert value(found, "multus_server_requests_in_flight") == 3
    assert value(found, "multus_k8s_cache_objects", cache="pods") == 7
    assert value(found, "multus_k8s_cache_synced", cache="pods") == 1
    assert value(found, "multus_k8s_cache_objects", cache="nads") == 0
    assert value(found, "multus_k8s_cache_synced", cache="nads") == 0
    assert any(s.name.startswith("process_") for s in found)

    later = samples(again)  # gauges are read at scrape time
    assert value(later, "multus_server_requests_in_flight") == 0
    assert value(later, "multus_k8s_cache_objects", cache="pods") == 8


async def test_registries_are_private() -> None:
    first, second = Metrics(process=False), Metrics(process=False)
    first.count_request("/cni", "POST", 200)
    found = samples(second.render().decode())
    assert not [s for s in found if s.name == "multus_server_request_total"]
    assert not [s for s in found if s.name.startswith("process_")]


async def test_the_app_counts_every_answer_with_upstream_labels() -> None:
    metrics = Metrics(process=False)

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def fail(request: web.Request) -> web.Response:
        raise RuntimeError("a bug")  # answered as a CNI error object, and counted so

    app = web.Application(middlewares=api_middlewares(metrics))
    app.router.add_get("/healthz", ok)
    app.router.add_post("/cni", fail)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, HOST, 0)
        await site.start()
        async with aiohttp.ClientSession() as session:
            for method, path in [
                ("GET", "/healthz"),
                ("GET", "/healthz"),
                ("POST", "/cni"),
                ("GET", "/cni"),
                ("GET", "/nowhere"),
            ]:
                url = f"http://{HOST}:{site.port}{path}"
                async with session.request(method, url) as response:
                    await response.read()
    finally:
        await runner.cleanup()
    found = samples(metrics.render().decode())
    total = "multus_server_request_total"
    assert value(found, total, handler="/healthz", code="200", method="get") == 2
    assert value(found, total, handler="/cni", code="400", method="post") == 1
    assert value(found, total, handler="/cni", code="405", method="get") == 1
    assert value(found, total, handler="NotFound", code="404", method="get") == 1


async def test_stopping_frees_the_port() -> None:
    metrics = Metrics(process=False)
    async with metrics.serve(0, host=HOST) as port:
        await scrape(port)
    with pytest.raises(aiohttp.ClientConnectionError):
        await scrape(port)
    # A restarted daemon can bind the same port again.
    async with metrics.serve(port, host=HOST) as again:
        assert again == port
        await scrape(port)


async def test_recorder_keeps_nothing_but_still_times_the_request_s_phases() -> None:
    """Without ``metricsPort`` the daemon holds a :class:`Recorder`: nothing is kept for
    Prometheus (no registry, nothing that grows per request), yet its phases still go to the
    request's timeline, whose debug line says where the wall time went."""
    recorder = Recorder()
    with timeline.timeline() as phases:
        recorder.count_request("/cni", "POST", 200)
        recorder.observe_command("ADD", 1.0, ok=True)
        recorder.observe_bucket_wait(0.1)
        recorder.observe_phase("pod_lookup", 0.004)
        with recorder.phase("delegate", plugin="macvlan"):
            await asyncio.sleep(0)
        with pytest.raises(RuntimeError), recorder.phase("status_write"):
            raise RuntimeError("a failed phase is timed too")
    assert vars(recorder) == {}, "a Recorder holds no state"
    assert [p.name for p in phases] == ["delegate[macvlan]", "status_write"]


async def test_served_with_the_daemon_s_runner_options() -> None:
    """What ``daemon_parts.metrics_site`` passes: the listeners' shared aiohttp options."""
    metrics = Metrics(process=False)
    metrics.count_request("/cni", "POST", 200)
    options = runner_options(header_timeout=HEADER_TIMEOUT, shutdown_timeout=SHUTDOWN_TIMEOUT)
    async with metrics.serve(0, host=HOST, options=options) as port:
        _, text = await scrape(port)
    total = "multus_server_request_total"
    assert value(samples(text), total, handler="/cni", code="200", method="post") == 1
