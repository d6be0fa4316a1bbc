"""The event recorder's poster has an owner and survives a bad event: an unexpected error
while posting one event is logged and counted, and the next event is still posted (it used to
kill the task silently, and with it every later event)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from multusd.k8s.apiconfig import load_api_config
from multusd.k8s.client import KubeClient
from multusd.k8s.events import EventRecorder
from multusd.kubesim import KubeSim


@pytest.fixture
async def client(short_tmp: Path) -> AsyncIterator[tuple[KubeSim, KubeClient]]:
    async with KubeSim() as sim:
        cfg = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "kubeconfig")), {})
        async with KubeClient(cfg) as c:
            yield sim, c


async def test_an_unexpected_error_on_one_event_does_not_stop_the_next(
    client: tuple[KubeSim, KubeClient], caplog: pytest.LogCaptureFixture
) -> None:
    sim, kube = client
    caplog.set_level(logging.ERROR, logger="multusd.k8s.events")
    good = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}}
    bad = {"metadata": {"name": "q", "namespace": "default", "uid": object()}}  # not JSON
    failures: list[str] = []
    recorder = EventRecorder(kube)
    async with recorder.running(on_failure=failures.append):
        recorder.record(bad, "Normal", "AddedInterface", "Add eth0 []")
        recorder.record(bad, "Normal", "AddedInterface", "Add eth1 []")
        recorder.record(good, "Normal", "AddedInterface", "Add eth0 []")
        await asyncio.wait_for(recorder.wait_idle(), 10)
    assert (recorder.stats.failed, recorder.stats.posted) == (2, 1)
    assert sim.stats.count("create", "events") == 1
    assert failures == []  # logged and counted; not a reason to stop the daemon
    logged = [r for r in caplog.records if "not recorded (unexpected error)" in r.getMessage()]
    assert len(logged) == 2
    assert logged[0].exc_info and not logged[1].exc_info  # one traceback, then one line


async def test_the_poster_is_cancelled_and_awaited_on_exit(
    client: tuple[KubeSim, KubeClient],
) -> None:
    _, kube = client
    recorder = EventRecorder(kube)
    async with recorder.running(drain=0.1):
        (poster,) = [t for t in asyncio.all_tasks() if t.get_name() == "event-recorder"]
    assert poster.done() and poster.cancelled()
