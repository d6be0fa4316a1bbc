"""50,000 pods: the emulator holds them and serves a full list (time and memory printed only)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import pytest

from multusd.kubesim import KubeSim
from multusd.kubesim.operations import create
from multusd.kubesim.resources import PODS

POD_COUNT = 50_000


def _pod(i: int) -> dict[str, object]:
    node = f"node{i % 500}"
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


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.scale
@pytest.mark.timeout(120)
async def test_list_50k_pods(kubesim: KubeSim):
    rss_before = _rss_mib()
    start = time.perf_counter()
    for i in range(POD_COUNT):
        create(kubesim.state, PODS, "default", _pod(i), keep_status=True)
    fill = time.perf_counter() - start
    stored = _rss_mib() - rss_before

    headers = {"Authorization": f"Bearer {kubesim.token}"}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(kubesim.url, headers=headers, timeout=timeout) as http:
        start = time.perf_counter()
        async with http.get("/api/v1/pods") as resp:
            assert resp.status == 200
            body = await resp.read()
        full_list = time.perf_counter() - start
        start = time.perf_counter()
        async with http.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode7") as resp:
            node_body = await resp.json()
        node_list = time.perf_counter() - start
        start = time.perf_counter()
        async with http.get("/api/v1/pods?limit=500") as resp:
            first_page = await resp.json()
        paged = time.perf_counter() - start

    rss = _rss_mib()  # before this test decodes the list itself
    decoded = await asyncio.to_thread(json.loads, body)
    assert len(decoded["items"]) == POD_COUNT
    assert len(node_body["items"]) == POD_COUNT // 500
    assert first_page["metadata"]["remainingItemCount"] == POD_COUNT - 500
    print(
        f"\nkubesim scale: {POD_COUNT} pods stored in {fill:.2f} s, "
        f"RSS +{stored:.0f} MiB for the store, {rss:.0f} MiB for the process; "
        f"full list {len(body) / 2**20:.1f} MiB in {full_list:.2f} s; "
        f"node-filtered list in {node_list * 1000:.0f} ms; first 500-item page in "
        f"{paged * 1000:.0f} ms"
    )
