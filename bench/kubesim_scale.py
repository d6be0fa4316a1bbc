"""Issue 3 benchmark: how the API emulator holds up with many pods (the other benchmarks lean on
it). For 1k, 10k and 50k pods: time to store them, the store's memory, and the time of a full
list, a node-filtered list and a first page, measured over HTTP in one process."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import aiohttp

from bench.common import proc_mib, report
from multusd.kubesim import KubeSim
from multusd.kubesim.operations import create
from multusd.kubesim.resources import PODS

SIZES = (1_000, 10_000, 50_000)
NODES = 500


def _pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{i:05d}",
            "namespace": "default",
            "labels": {"app": f"app{i % 50}"},
            "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan-conf"},
        },
        "spec": {"nodeName": f"node{i % NODES}", "containers": [{"name": "c", "image": "b"}]},
        "status": {"phase": "Running", "podIP": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"},
    }


async def _timed_get(http: aiohttp.ClientSession, path: str) -> tuple[float, int]:
    start = time.perf_counter()
    async with http.get(path) as resp:
        body = await resp.read()
        assert resp.status == 200, resp.status
    return time.perf_counter() - start, len(body)


async def measure(count: int) -> dict[str, float]:
    gc.collect()
    async with KubeSim() as sim:
        before = proc_mib()
        start = time.perf_counter()
        for i in range(count):
            create(sim.state, PODS, "default", _pod(i), keep_status=True)
        fill = time.perf_counter() - start
        stored = proc_mib() - before
        headers = {"Authorization": f"Bearer {sim.token}"}
        async with aiohttp.ClientSession(sim.url, headers=headers) as http:
            full, size = await _timed_get(http, "/api/v1/pods")
            node, _ = await _timed_get(http, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode7")
            page, _ = await _timed_get(http, "/api/v1/pods?limit=500")
    return {
        "pods": count,
        "store_s": fill,
        "store_mib": stored,
        "full_list_s": full,
        "full_list_mib": size / 2**20,
        "node_list_ms": node * 1000,
        "first_page_ms": page * 1000,
    }


def main() -> list[dict[str, float]]:
    rows = [asyncio.run(measure(n)) for n in SIZES]
    lines = [
        "Command: `tox -e bench -- kubesim_scale`. One process; the list is read over HTTP.",
        "",
        "| pods | store time s | store RSS MiB | full list s | full list MiB "
        f"| node-filtered list ms (1/{NODES}) | first 500-item page ms |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['pods']:,} | {r['store_s']:.2f} | {r['store_mib']:.0f} | {r['full_list_s']:.2f} "
        f"| {r['full_list_mib']:.1f} | {r['node_list_ms']:.0f} | {r['first_page_ms']:.0f} |"
        for r in rows
    ]
    table = "\n".join(lines)
    report("kubesim_scale", table, {"rows": rows}, section="kubesim")
    return rows
