"""Issue 8d: the readiness indicator watched (ours, upstream HEAD) vs stat-ed per request (the
seed), A/B with ``benchmarkReadinessStat``.

Both sides run the real daemon and shim against the emulator with a readiness file; ADDs run
back to back while the file is steady, then while it flaps (removed for 1.5 s, back for 1.5 s),
as a primary network's agent restarting would make it. The watch treats a gap shorter than its
5 s grace as a rotation and leaves requests alone; the per-request stat stalls every ADD that
lands in a gap until its next 1 s poll finds the file again.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import Stats, chart, report
from bench.kube_requests import Rig, run_shim
from multusd.kubesim import KubeSim, Settings

MODES = {"watch (ours)": False, "stat per request (seed)": True}
GAP, PRESENT = 1.5, 1.5
HEADER = (
    "| readiness check | steady p50 ms | steady p99 ms | flapping p50 ms | flapping p99 ms "
    "| failed ADDs | daemon still up |\n" + "|---" * 7 + "|"
)


async def _flap(path: Path) -> None:
    while True:
        await asyncio.sleep(PRESENT)
        path.unlink()
        await asyncio.sleep(GAP)
        path.write_text("ok")


async def _adds(rig: Rig, count: int) -> tuple[Stats, int]:
    """ADD latency over ``count`` ADD+DEL pairs, and how many ADDs failed."""
    seconds: list[float] = []
    failed = 0
    for pod in await rig.cached_pods(count):
        async with rig.netns_envs([pod]) as (env,):
            start = time.perf_counter()
            failed += await run_shim(rig.shim, "ADD", rig.shim_conf, env) != 0
            seconds.append(time.perf_counter() - start)
            await run_shim(rig.shim, "DEL", rig.shim_conf, env)
    return Stats.of(seconds), failed


async def run(count: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with KubeSim(Settings(bookmark_interval=5.0)) as sim:
        for mode, stat in MODES.items():
            with tempfile.TemporaryDirectory(prefix="mbr-", dir="/tmp") as tmp:
                ready = Path(tmp) / "ready" / "primary-ready"
                ready.parent.mkdir()
                ready.write_text("ok")
                extra: dict[str, Any] = {
                    "readinessindicatorfile": str(ready),
                    "benchmarkReadinessStat": stat,
                }
                async with Rig(sim, Path(tmp), **extra) as rig:
                    await _adds(rig, 3)  # warm-up
                    steady, steady_failed = await _adds(rig, count)
                    flapper = asyncio.create_task(_flap(ready))
                    try:
                        flapping, flapping_failed = await _adds(rig, count)
                    finally:
                        flapper.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await flapper
                    alive = rig.proc is not None and rig.proc.returncode is None
                out[mode] = {
                    "steady": asdict(steady),
                    "steady_failed": steady_failed,
                    "flapping": asdict(flapping),
                    "flapping_failed": flapping_failed,
                    "daemon_alive_after_flapping": alive,
                }
    return out


def _chart(data: dict[str, Any]) -> None:
    columns = [
        (phase, stat, f"{phase} {label}")
        for phase in ("steady", "flapping")
        for stat, label in (("median_ms", "p50"), ("p99_ms", "p99"))
    ]
    width = 0.38
    with chart("readiness_stat", size=(6.5, 3.6)) as ax:
        for k, (mode, r) in enumerate(data.items()):
            values = [r[phase][stat] for phase, stat, _ in columns]
            xs = [i + (k - 0.5) * width for i in range(len(columns))]
            ax.bar_label(ax.bar(xs, values, width, label=mode), fmt="%.0f", fontsize="x-small")
        ax.set_xticks(range(len(columns)), [label for _, _, label in columns])
        ax.set_yscale("log")
        ax.set_ylabel("ADD latency, ms (log scale)")
        ax.set_title(f"Readiness file steady, then flapping ({GAP} s gone / {PRESENT} s back)")
        ax.legend(fontsize="small", loc="upper left")
        ax.grid(alpha=0.3, axis="y")


def main(count: int = 40) -> dict[str, Any]:
    data = asyncio.run(run(count))
    _chart(data)
    rows = "\n".join(
        f"| {mode} | {r['steady']['median_ms']:.1f} | {r['steady']['p99_ms']:.1f} "
        f"| {r['flapping']['median_ms']:.1f} | {r['flapping']['p99_ms']:.1f} "
        f"| {r['flapping_failed']} | {'yes' if r['daemon_alive_after_flapping'] else 'no'} |"
        for mode, r in data.items()
    )
    table = f"""Command: `tox -e bench -- readiness_stat` (as root). {count} ADDs back to back per
column, through the real shim and daemon; flapping = the readiness file removed for {GAP} s,
back for {PRESENT} s, over and over.

{HEADER}
{rows}

![ADD latency, readiness file watched vs stat-ed per request](images/readiness_stat.png)"""
    report("readiness_stat", table, data)
    return data
