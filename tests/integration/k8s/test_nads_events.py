"""NAD lookups (cache, then one GET) and background event posting, against the emulator."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from multusd.k8s.apiconfig import load_api_config
from multusd.k8s.client import KubeClient
from multusd.k8s.errors import ServerError
from multusd.k8s.events import EventRecorder, added_interface_message
from multusd.k8s.nads import NadLookup
from multusd.k8s.store import Store, trim_nad
from multusd.kubesim import ErrorRule, KubeSim

NAD_GROUP = "k8s.cni.cncf.io"


def nad(name: str, config: str = '{"type":"macvlan"}') -> dict[str, Any]:
    return {
        "apiVersion": f"{NAD_GROUP}/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"config": config},
    }


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    async with KubeSim() as s:
        yield s


@pytest.fixture
async def client(sim: KubeSim) -> AsyncIterator[KubeClient]:
    directory = Path(tempfile.mkdtemp(prefix="k8s-", dir="/tmp"))
    try:
        cfg = await load_api_config(str(await sim.write_kubeconfig(directory / "kubeconfig")), {})
        async with KubeClient(cfg) as c:
            yield c
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def test_nad_from_cache_costs_no_request(sim: KubeSim, client: KubeClient) -> None:
    store = Store()
    store.replace([trim_nad(sim.create(nad("cached")))], "1")
    sim.stats.reset()
    found = await NadLookup(client, store).get("default", "cached")
    assert found is not None and found["spec"]["config"] == '{"type":"macvlan"}'
    assert sim.stats.count("get") == 0


async def test_nad_missing_from_cache_is_fetched_once(sim: KubeSim, client: KubeClient) -> None:
    sim.create(nad("fresh"))  # created after the cache was filled
    lookup = NadLookup(client, Store())
    found = await lookup.get("default", "fresh")
    assert found is not None and set(found["metadata"]) <= {
        "name", "namespace", "uid", "resourceVersion", "annotations",
    }  # fmt: skip
    assert await lookup.get("default", "nowhere") is None
    assert sim.stats.count("get", "network-attachment-definitions") == 2


async def test_nad_lookup_passes_other_errors_on(sim: KubeSim, client: KubeClient) -> None:
    sim.faults.errors.append(ErrorRule(code=500, verb="get", count=1))
    with pytest.raises(ServerError):
        await NadLookup(client, Store()).get("default", "any")


async def test_events_are_posted_in_the_background(sim: KubeSim, client: KubeClient) -> None:
    pod = sim.create(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
         "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )  # fmt: skip
    recorder = EventRecorder(client)
    async with recorder.running():
        message = added_interface_message("net1", ["10.1.1.5/24"], "default/macvlan-conf")
        recorder.record(pod, "Normal", "AddedInterface", message)
        await asyncio.wait_for(recorder.wait_idle(), 10)
    assert recorder.stats.posted == 1
    listed = await client.get("/api/v1/namespaces/default/events")
    (event,) = listed["items"]
    assert event["reason"] == "AddedInterface"
    assert event["message"] == "Add net1 [10.1.1.5/24] from default/macvlan-conf"
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert event["source"] == {"component": "multus"}


async def test_a_failing_event_api_never_blocks_or_raises(sim: KubeSim, client: KubeClient) -> None:
    sim.faults.errors.append(ErrorRule(code=500, verb="create", resource="events"))
    recorder = EventRecorder(client, capacity=2)
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}}
    async with recorder.running(drain=5):
        for _ in range(5):
            recorder.record(pod, "Normal", "AddedInterface", "Add eth0 []")
    assert recorder.stats.dropped >= 1
    assert recorder.stats.failed + recorder.stats.dropped == 5


def test_added_interface_message_without_network_name() -> None:
    assert added_interface_message("eth0", ["10.0.0.2/24", "fd00::2/64"], "") == (
        "Add eth0 [10.0.0.2/24 fd00::2/64]"
    )
