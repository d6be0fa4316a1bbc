"""Issue 8a: what the watch cache buys an ADD, A/B against the seed's direct GET.

The same daemon, shim and bridge network run twice against the emulator, once with pods read
from the watch cache (the default) and once with ``benchmarkDirectPodGet``; the emulator adds
0, 5 and 50 ms to every API request, as a loaded or distant API server would. Both sides pay
the network-status PATCH; only the direct side pays the pod GET.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import Stats, chart, report
from bench.kube_requests import Rig, run_shim, timed_shim
from multusd.kubesim import KubeSim, Settings
from multusd.kubesim.faults import LatencyRule

MODES: dict[str, dict[str, Any]] = {
    "watch cache": {},
    "direct GET (seed)": {"benchmarkDirectPodGet": True},
}
LATENCIES_MS = (0, 5, 50)


async def _pairs(sim: KubeSim, rig: Rig, count: int) -> tuple[Stats, float]:
    """ADD latency and pod GETs per ADD over ``count`` ADD+DEL pairs of cached pods."""
    seconds: list[float] = []
    gets = 0
    for pod in await rig.cached_pods(count):
        async with rig.netns_envs([pod]) as (env,):
            sim.stats.reset()
            seconds.append(await timed_shim(rig, "ADD", env))
            gets += sim.stats.count("get", "pods")
            assert await run_shim(rig.shim, "DEL", rig.shim_conf, env) == 0
    return Stats.of(seconds), gets / count


async def run(count: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with KubeSim(Settings(bookmark_interval=5.0)) as sim:
        for mode, extra in MODES.items():
            with tempfile.TemporaryDirectory(prefix="mbl-", dir="/tmp") as tmp:
                async with Rig(sim, Path(tmp), **extra) as rig:
                    await _pairs(sim, rig, 3)  # warm-up: imports, first plugin runs
                    for ms in LATENCIES_MS:
                        sim.faults.latency = [LatencyRule(seconds=ms / 1000)] if ms else []
                        stats, gets = await _pairs(sim, rig, count)
                        out[f"{mode} @ {ms} ms"] = {**asdict(stats), "pod_gets_per_add": gets}
                    sim.faults.latency = []
    return out


def _chart(data: dict[str, Any]) -> None:
    with chart("pod_lookup", size=(6.5, 3.6)) as ax:
        for mode in MODES:
            rows = [data[f"{mode} @ {ms} ms"] for ms in LATENCIES_MS]
            line = ax.plot(LATENCIES_MS, [r["median_ms"] for r in rows], marker="o",
                           label=f"{mode}, median")[0]  # fmt: skip
            ax.plot(LATENCIES_MS, [r["p99_ms"] for r in rows], marker="x", linestyle="--",
                    color=line.get_color(), label=f"{mode}, p99")  # fmt: skip
        ax.set_xlabel("latency the emulator adds to every API request, ms")
        ax.set_ylabel("ADD through shim and daemon, ms")
        ax.set_title("Pod lookup: watch cache vs a GET per ADD")
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)


def main(count: int = 30) -> dict[str, Any]:
    data = asyncio.run(run(count))
    _chart(data)
    rows = "\n".join(
        f"| {key.split(' @ ')[0]} | {key.split(' @ ')[1]} | {v['median_ms']:.1f} | "
        f"{v['p99_ms']:.1f} | {v['pod_gets_per_add']:.2f} |"
        for key, v in data.items()
    )
    table = f"""Command: `tox -e bench -- pod_lookup` (as root). {count} ADDs per row, each of a pod
already in the watch cache, through the real shim and daemon to a bridge network; the emulator
delays every API request by the added latency.

![ADD latency against API latency, cache vs direct GET](images/pod_lookup.png)

| pod lookup | added API latency | ADD median ms | ADD p99 ms | pod GETs per ADD |
|---|---|---|---|---|
{rows}"""
    report("pod_lookup", table, data)
    return data
