"""Issue 8b: a mass creation (200 pods ADDed at once) and a deletion storm (500 pods DELed at
once), at client-go's old 5 QPS and at our 50, through the real shim and daemon.

Every ADD writes one network-status PATCH (awaited) and posts one event (in the background);
both pass through the daemon's single token bucket, so the bucket's rate bounds how fast a burst
of pod creations completes. A DEL reads the watch cache and costs no request; with the seed's
direct GET (``benchmarkDirectPodGet``) every DEL spends one GET, and at 5 QPS a storm of them
queues behind the bucket. Each deletion storm runs on a daemon restarted with the switches under
test, after its 500 pods were ADDed (at 50 QPS, 16 at a time, untimed) and deleted from the API.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import Stats, chart, proc_mib, report
from bench.kube_requests import Rig, deletion_storm, events_posted, per_second, timed_shim
from multusd.kubesim import KubeSim, Settings

CREATE = 200
DELETE = 500
# client-go's old defaults (5 QPS, burst 10), then upstream Multus's client since #1154.
RATES = {"5 QPS (burst 10)": (5, 10), "50 QPS (burst 50)": (50, 50)}
LOOKUPS = {"watch cache": False, "direct GET (seed)": True}
_HEADER = "| {} | wall s | {} p50 s | {} p99 s | {} | peak req/s | daemon RSS before → peak MiB |"
CREATION_HEADER = (
    _HEADER.format("client rate", "ADD", "ADD", "all requests done s") + "\n" + ("|---" * 7 + "|")
)
DELETION_HEADER = _HEADER.format("client rate, pod lookup", "DEL", "DEL", "API requests") + (
    "\n" + "|---" * 7 + "|"
)


async def creation(sim: KubeSim, rig: Rig, count: int) -> dict[str, Any]:
    """``count`` ADDs at once; the time until the last of their API requests is done too."""
    assert rig.proc is not None
    pods = await rig.cached_pods(count)
    async with rig.netns_envs(pods) as envs:
        rss_before = proc_mib(pid=rig.proc.pid)
        sim.stats.reset()
        since = time.monotonic()
        adds = await asyncio.gather(*(timed_shim(rig, "ADD", env) for env in envs))
        wall = time.monotonic() - since
        await events_posted(sim, count)
        drained = time.monotonic() - since
        rate = per_second(sim, since)
        rss_peak = proc_mib("VmHWM", pid=rig.proc.pid)
        await asyncio.gather(*(timed_shim(rig, "DEL", env) for env in envs))
    return {
        "wall_s": wall,
        "latency": asdict(Stats.of(adds)),
        "all_requests_done_s": drained,
        "requests_per_second": rate,
        "daemon_rss_before_mib": rss_before,
        "daemon_rss_peak_mib": rss_peak,
    }


async def run(create: int, delete: int) -> dict[str, Any]:
    out: dict[str, Any] = {"creation": {}, "deletion": {}}
    async with KubeSim(Settings(bookmark_interval=5.0)) as sim:
        for label, (qps, burst) in RATES.items():
            rate: dict[str, Any] = {"kubeClientQPS": qps, "kubeClientBurst": burst}
            with tempfile.TemporaryDirectory(prefix="mbq-", dir="/tmp") as tmp:
                async with Rig(sim, Path(tmp), **rate) as rig:
                    out["creation"][label] = await creation(sim, rig, create)
            for lookup, direct in LOOKUPS.items():
                with tempfile.TemporaryDirectory(prefix="mbq-", dir="/tmp") as tmp:
                    async with Rig(sim, Path(tmp)) as rig:
                        out["deletion"][f"{label}, {lookup}"] = await deletion_storm(
                            sim, rig, delete, **rate, benchmarkDirectPodGet=direct
                        )
    return out


def _chart(data: dict[str, Any], create: int, delete: int) -> None:
    with chart("qps_storm", rows=2, size=(8, 6.4)) as (top, bottom):
        for label, result in data["creation"].items():
            rate = result["requests_per_second"]
            top.step(range(len(rate)), rate, where="post", label=label)
        top.set_xlabel(f"seconds since {create} ADDs started at once")
        top.set_title("Mass creation: API requests per second through the daemon's token bucket")
        for label, result in data["deletion"].items():
            rate = result["requests_per_second"]
            style = "--" if "cache" in label else "-"
            bottom.step(range(len(rate)), rate, style, where="post", label=label)
        bottom.set_xlabel(f"seconds since {delete} DELs started at once")
        bottom.set_title("Deletion storm: API requests per second (the watch cache makes none)")
        for ax in (top, bottom):
            ax.set_ylabel("requests/s")
            ax.legend(fontsize="small")
            ax.grid(alpha=0.3)


def _rows(results: dict[str, Any], extra: str) -> str:
    out = []
    for label, r in results.items():
        cells = [
            label,
            f"{r['wall_s']:.1f}",
            f"{r['latency']['median_ms'] / 1000:.2f}",
            f"{r['latency']['p99_ms'] / 1000:.2f}",
            extra.format(**r),
            str(max(r["requests_per_second"])),
            f"{r['daemon_rss_before_mib']:.1f} → {r['daemon_rss_peak_mib']:.1f}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(create: int = CREATE, delete: int = DELETE) -> dict[str, Any]:
    data = asyncio.run(run(create, delete))
    _chart(data, create, delete)
    table = f"""Command: `tox -e bench -- qps_storm` (as root). Real shim and daemon, bridge +
host-local, one network namespace per pod.

Mass creation: {create} pods ADDed at once.

{CREATION_HEADER}
{_rows(data["creation"], "{all_requests_done_s:.1f}")}

Deletion storm: {delete} pods deleted from the API, then DELed at once.

{DELETION_HEADER}
{_rows(data["deletion"], "{requests}")}

![API requests per second during the mass creation and the deletion storm](images/qps_storm.png)"""
    report("qps_storm", table, data)
    return data
