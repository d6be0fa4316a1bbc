"""Issue 8b: a mass creation and a deletion storm at client-go's old 5 QPS and at our 50.

200 pods are ADDed at once through the real shim and daemon, then deleted from the API and
DELed at once. Every ADD writes one network-status PATCH (awaited) and posts one event (in the
background); both pass through the daemon's single token bucket, so the bucket's rate bounds how
fast a burst of pod creations completes. DEL reads the watch cache and costs no request.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import REPO, Stats, proc_mib, publish, save
from bench.kube_requests import Rig, run_shim
from multusd.kubesim import KubeSim, Settings

# client-go's old defaults (5 QPS, burst 10), then upstream Multus's client since #1154.
RATES = {"5 QPS (burst 10)": (5, 10), "50 QPS (burst 50)": (50, 50)}
HEADER = (
    "| client rate | ADD wall s | ADD p50 s | ADD p99 s | all requests done s | peak req/s "
    "| DEL wall s | DEL p99 s | DEL requests | daemon RSS before → peak MiB |\n" + "|---" * 10 + "|"
)
CHART = REPO / "docs" / "images" / "qps_storm.png"


def _per_second(sim: KubeSim, since: float) -> list[int]:
    """Requests (watches excluded) in each second after ``since``."""
    stamps = [r.started - since for r in sim.stats.requests() if r.verb != "watch"]
    counts = [0] * (int(max(stamps, default=0)) + 1)
    for t in stamps:
        counts[max(0, int(t))] += 1
    return counts


async def _storm(sim: KubeSim, rig: Rig, count: int) -> dict[str, Any]:
    pods = await rig.cached_pods(count)
    async with rig.netns_envs(pods) as envs:
        return await _storm_in(sim, rig, pods, envs)


async def _storm_in(
    sim: KubeSim, rig: Rig, pods: list[tuple[str, str]], envs: list[dict[str, str]]
) -> dict[str, Any]:
    count = len(pods)

    async def timed(command: str, env: dict[str, str]) -> float:
        start = time.perf_counter()
        assert await run_shim(rig.shim, command, rig.shim_conf, env) == 0
        return time.perf_counter() - start

    assert rig.proc is not None
    rss_before = proc_mib(pid=rig.proc.pid)
    sim.stats.reset()
    since = time.monotonic()
    adds = await asyncio.gather(*(timed("ADD", env) for env in envs))
    add_wall = time.monotonic() - since
    async with asyncio.timeout(600):  # the background event posts drain through the bucket
        while sim.stats.count("create", "events") < count:
            await asyncio.sleep(0.1)
    drained = time.monotonic() - since
    add_rate = _per_second(sim, since)
    for name, _ in pods:
        sim.delete("pods", "default", name)
    sim.stats.reset()
    since = time.monotonic()
    dels = await asyncio.gather(*(timed("DEL", env) for env in envs))
    del_wall = time.monotonic() - since
    del_requests = sum(1 for r in sim.stats.requests() if r.verb != "watch")
    rss_peak = proc_mib("VmHWM", pid=rig.proc.pid)
    return {
        "add_wall_s": add_wall,
        "add": asdict(Stats.of(adds)),
        "all_requests_done_s": drained,
        "add_requests_per_second": add_rate,
        "del_wall_s": del_wall,
        "del": asdict(Stats.of(dels)),
        "del_requests": del_requests,
        "daemon_rss_before_mib": rss_before,
        "daemon_rss_peak_mib": rss_peak,
    }


async def run(count: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with KubeSim(Settings(bookmark_interval=5.0)) as sim:
        for label, (qps, burst) in RATES.items():
            with tempfile.TemporaryDirectory(prefix="mbq-", dir="/tmp") as tmp:
                extra = {"kubeClientQPS": qps, "kubeClientBurst": burst}
                async with Rig(sim, Path(tmp), **extra) as rig:
                    out[label] = await _storm(sim, rig, count)
    return out


def _chart(data: dict[str, Any], count: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=110)
    for label, result in data.items():
        rate = result["add_requests_per_second"]
        ax.step(range(len(rate)), rate, where="post", label=label)
    ax.set_xlabel(f"seconds since {count} ADDs started at once")
    ax.set_ylabel("API requests per second")
    ax.set_title("Mass creation: API request rate through the daemon's token bucket")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    CHART.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(CHART)
    plt.close(fig)


def main(count: int = 200) -> dict[str, Any]:
    data = asyncio.run(run(count))
    rows = "\n".join(
        f"| {label} | {r['add_wall_s']:.1f} | {r['add']['median_ms'] / 1000:.2f} | "
        f"{r['add']['p99_ms'] / 1000:.2f} | {r['all_requests_done_s']:.1f} | "
        f"{max(r['add_requests_per_second'])} | {r['del_wall_s']:.1f} | "
        f"{r['del']['p99_ms'] / 1000:.2f} | {r['del_requests']} "
        f"| {r['daemon_rss_before_mib']:.1f} → {r['daemon_rss_peak_mib']:.1f} |"
        for label, r in data.items()
    )
    _chart(data, count)
    table = f"""Command: `tox -e bench -- qps_storm` (as root). {count} pods ADDed at once through
the real shim and daemon (bridge + host-local), then deleted from the API and DELed at once.

{HEADER}
{rows}

![API requests per second during the mass creation](images/qps_storm.png)"""
    publish("qps_storm", table)
    save("qps_storm", data)
    print(table)
    return data
