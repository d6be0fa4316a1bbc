"""50,000 pods: the emulator holds them and serves them whole, filtered and paged, with nothing
lost or duplicated. How long that takes and what it costs is ``python -m bench kubesim_scale``'s
to measure (1k, 10k and 50k pods), not this test's."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from multusd.kubesim import KubeSim
from multusd.kubesim.operations import create
from multusd.kubesim.resources import PODS

POD_COUNT = 50_000
NODES = 500
PAGE = 500


def _pod(i: int) -> dict[str, object]:
    node = f"node{i % NODES}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{i:05d}",
            "namespace": "default",
            "labels": {"app": f"app{i % 50}", "tier": "web"},
            "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan-conf"},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1.36"}]},
        "status": {"phase": "Running", "podIP": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"},
    }


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [item["metadata"]["name"] for item in items]


@pytest.mark.scale
@pytest.mark.timeout(120)
async def test_list_50k_pods(kubesim: KubeSim) -> None:
    for i in range(POD_COUNT):
        create(kubesim.state, PODS, "default", _pod(i), keep_status=True)

    headers = {"Authorization": f"Bearer {kubesim.token}"}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(kubesim.url, headers=headers, timeout=timeout) as http:
        async with http.get("/api/v1/pods") as resp:
            assert resp.status == 200
            body = await resp.read()
        async with http.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode7") as resp:
            assert resp.status == 200
            node_body = await resp.json()
        async with http.get(f"/api/v1/pods?limit={PAGE}") as resp:
            assert resp.status == 200
            first_page = await resp.json()
        token = first_page["metadata"]["continue"]
        async with http.get(f"/api/v1/pods?limit={PAGE}&continue={token}") as resp:
            assert resp.status == 200
            second_page = await resp.json()

    decoded = await asyncio.to_thread(json.loads, body)
    # Every pod, once, as stored (status kept).
    names = _names(decoded["items"])
    assert len(names) == POD_COUNT and len(set(names)) == POD_COUNT
    assert set(names) == {f"pod-{i:05d}" for i in range(POD_COUNT)}
    assert decoded["items"][7]["status"]["podIP"] == "10.0.0.7"
    # The node's pods, and only those.
    on_node7 = _names(node_body["items"])
    assert sorted(on_node7) == [f"pod-{i:05d}" for i in range(7, POD_COUNT, NODES)]
    assert {item["spec"]["nodeName"] for item in node_body["items"]} == {"node7"}
    # Pages: full, consecutive, consistent with the whole list, the rest counted.
    assert first_page["metadata"]["remainingItemCount"] == POD_COUNT - PAGE
    assert second_page["metadata"]["remainingItemCount"] == POD_COUNT - 2 * PAGE
    paged = _names(first_page["items"]) + _names(second_page["items"])
    assert paged == names[: 2 * PAGE]
