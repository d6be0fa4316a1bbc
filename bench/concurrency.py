"""Issue 8f: ADD throughput as concurrent requests grow from 1 to 256, with and without
``connectionLimit``.

Each step ADDs that many pods at once through the real shim and daemon (bridge + host-local in
real network namespaces), then DELs them. Throughput is ADDs completed per second of wall time.
On 2 cores the plugins' own process start-up is the limit; the cap trades queueing in the
daemon for fewer plugin processes fighting for the CPU and for host-local's file lock.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Stats, chart, report
from bench.kube_requests import Rig, run_shim, timed_shim
from multusd.kubesim import KubeSim, Settings

STEPS = (1, 4, 16, 64, 256)
CAP = 8
MODES: dict[str, dict[str, Any]] = {
    "no cap": {},
    f"connectionLimit {CAP}": {"connectionLimit": CAP},
    "no cap, uvloop": {"loop": "uvloop"},
}


async def _step(rig: Rig, width: int) -> dict[str, Any]:
    pods = await rig.cached_pods(width)

    async with rig.netns_envs(pods) as envs:
        start = time.perf_counter()
        latencies = await asyncio.gather(*(timed_shim(rig, "ADD", env) for env in envs))
        wall = time.perf_counter() - start
        await asyncio.gather(*(run_shim(rig.shim, "DEL", rig.shim_conf, env) for env in envs))
    stats = Stats.of(latencies)
    return {"width": width, "wall_s": wall, "adds_per_s": width / wall,
            "p50_ms": stats.median_ms, "p99_ms": stats.p99_ms}  # fmt: skip


async def run() -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with KubeSim(Settings(bookmark_interval=5.0)) as sim:
        for mode, extra in MODES.items():
            with tempfile.TemporaryDirectory(prefix="mbc-", dir="/tmp") as tmp:
                async with Rig(sim, Path(tmp), **extra) as rig:
                    await _step(rig, 4)  # warm-up
                    out[mode] = [await _step(rig, width) for width in STEPS]
    return out


def _chart(data: dict[str, Any]) -> None:
    with chart("concurrency", cols=2, size=(9, 3.6)) as (rate, tail):
        for mode, steps in data.items():
            widths = [s["width"] for s in steps]
            rate.plot(widths, [s["adds_per_s"] for s in steps], marker="o", label=mode)
            tail.plot(widths, [s["p99_ms"] / 1000 for s in steps], marker="o", label=mode)
        for ax, title in ((rate, "ADDs completed per second"), (tail, "ADD p99 latency, s")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("ADDs issued at once")
            ax.set_title(title)
            ax.grid(alpha=0.3)
        rate.legend()


def main() -> dict[str, Any]:
    data = asyncio.run(run())
    _chart(data)
    rows = "\n".join(
        f"| {s['width']} | {mode} | {s['adds_per_s']:.1f} | {s['p50_ms']:.0f} | {s['p99_ms']:.0f} |"
        for mode, steps in data.items()
        for s in steps
    )
    table = f"""Command: `tox -e bench -- concurrency` (as root). At each width, that many ADDs
are issued at once through the real shim and daemon (bridge + host-local), then DELed.

| ADDs at once | daemon | ADDs/s | p50 ms | p99 ms |
|---|---|---|---|---|
{rows}

![ADD throughput and p99 as concurrency grows](images/concurrency.png)"""
    report("concurrency", table, data)
    return data
