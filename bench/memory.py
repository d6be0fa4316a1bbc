"""Issues 4 and 8e: daemon memory at idle, RSS of the real daemon process connected to the API
emulator with 110 (or 2,000) pods on its node and 10,000 more elsewhere, pods read as
protobuf (the default) and as JSON (upstream's daemon idles at ~44 MiB with 1,500 pods in the
API, as measured for issue 4). The chart adds the peaks during the storms of ``qps_storm``
(from its last saved results), so run that first; ``python -m bench`` does."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import PLUGIN_DIR, REPO, RESULTS, chart, proc_mib, report
from multusd.kubesim import KubeSim, Settings
from multusd.kubesim.operations import create
from multusd.kubesim.resources import PODS

NODE = "mem-node"
ON_NODE = 110  # the kubelet's default maxPods
BUSY_NODE = 2_000  # a node far past the kubelet's default: what the pod cache may have to hold


_CONTAINER = {"name": "c", "image": "registry/app:1", "env": [{"name": "A", "value": "b" * 200}]}


def _pod(i: int, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{node}-{i:05d}",
            "namespace": "default",
            "labels": {"app": f"app{i % 50}"},
            "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan-conf"},
        },
        "spec": {
            "nodeName": node,
            "containers": [_CONTAINER],
        },
    }  # fmt: skip


async def measure(elsewhere: int, protobuf: bool, on_node: int = ON_NODE) -> dict[str, Any]:
    async with KubeSim(Settings(bookmark_interval=30.0)) as sim:
        for i in range(on_node):
            create(sim.state, PODS, "default", _pod(i, NODE), keep_status=True)
        for i in range(elsewhere):
            create(sim.state, PODS, "default", _pod(i, f"other{i % 100}"), keep_status=True)
        with tempfile.TemporaryDirectory(prefix="mbm-", dir="/tmp") as tmp:
            w = Path(tmp)
            kubeconfig = await sim.write_kubeconfig(w / "kubeconfig")
            # As deployed: auto mode (the config manager watches the conf dir) with a
            # readiness indicator (watched too).
            (w / "net.d").mkdir()
            (w / "net.d" / "10-primary.conflist").write_text(json.dumps({
                "cniVersion": "1.0.0", "name": "primary", "plugins": [{"type": "bridge"}],
            }))  # fmt: skip
            (w / "ready").write_text("ok")
            (w / "daemon.json").write_text(json.dumps({
                "cniVersion": "1.0.0", "multusAutoconfigDir": str(w / "net.d"),
                "cniConfigDir": str(w / "net.d"), "readinessindicatorfile": str(w / "ready"),
                "socketDir": str(w / "run"), "binDir": PLUGIN_DIR, "cniDir": str(w / "cache"),
                "kubeconfig": str(kubeconfig), "kubeClientProtobuf": protobuf,
            }))  # fmt: skip
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "multusd", "--config", str(w / "daemon.json"), cwd=REPO,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "MULTUS_NODE_NAME": NODE},
            )  # fmt: skip
            try:
                for _ in range(600):
                    if (w / "run" / "multus.sock").exists():
                        break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(3.0)  # idle
                rss = proc_mib(pid=proc.pid)
            finally:
                proc.terminate()
                await proc.wait()
    encoding = "protobuf" if protobuf else "JSON"
    return {"on_node": on_node, "elsewhere": elsewhere, "encoding": encoding, "rss_mib": rss}


def _storm_peaks() -> dict[str, tuple[float, float]]:
    """(before, peak) daemon RSS of each storm of the last ``qps_storm`` run, at 50 QPS."""
    path = RESULTS / "qps_storm.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    out = {}
    for short, phase, label in (
        ("200 ADDs at once\n50 QPS, cache", "creation", "50 QPS (burst 50)"),
        ("500 DELs at once\n50 QPS, cache", "deletion", "50 QPS (burst 50), watch cache"),
        ("500 DELs at once\n5 QPS, direct GET", "deletion", "5 QPS (burst 10), direct GET (seed)"),
    ):
        r = data.get(phase, {}).get(label)
        if r:
            out[short] = (r["daemon_rss_before_mib"], r["daemon_rss_peak_mib"])
    return out


def _chart(rows: list[dict[str, Any]], peaks: dict[str, tuple[float, float]]) -> None:
    with chart("memory", cols=2, size=(10, 3.8)) as (idle, storm):
        sizes = sorted({(r["on_node"], r["elsewhere"]) for r in rows})
        width = 0.38
        for k, encoding in enumerate(("protobuf", "JSON")):
            by_size = {
                (r["on_node"], r["elsewhere"]): r["rss_mib"]
                for r in rows
                if r["encoding"] == encoding
            }
            rss = [by_size[n] for n in sizes]
            bars = idle.bar([i + (k - 0.5) * width for i in range(len(sizes))], rss, width,
                            label=encoding)  # fmt: skip
            idle.bar_label(bars, fmt="%.1f", fontsize="x-small")
        idle.set_xticks(range(len(sizes)), [f"{on:,} / {away:,}" for on, away in sizes])
        idle.set_xlabel("pods on this node / elsewhere in the cluster")
        idle.set_ylabel("daemon RSS, MiB")
        idle.set_title("Idle, as deployed")
        idle.axhline(44, color="grey", linestyle=":", label="upstream idle (~44)")
        idle.set_ylim(0, max(r["rss_mib"] for r in rows) * 1.25)
        idle.legend(fontsize="small", loc="upper left", ncol=3)
        names = list(peaks)
        before = [peaks[n][0] for n in names]
        peak = [peaks[n][1] for n in names]
        storm.bar([i - width / 2 for i in range(len(names))], before, width, label="before")
        bars = storm.bar([i + width / 2 for i in range(len(names))], peak, width, label="peak")
        storm.bar_label(bars, fmt="%.1f", fontsize="x-small")
        storm.set_xticks(range(len(names)), names, fontsize="small")
        storm.set_ylim(0, max(peak, default=60) * 1.2)
        storm.set_title("During the storms (qps_storm)")
        storm.legend(fontsize="small", loc="upper left", ncol=2)
        for ax in (idle, storm):
            ax.grid(alpha=0.3, axis="y")


def main() -> list[dict[str, Any]]:
    rows = [
        asyncio.run(measure(elsewhere, protobuf, on_node))
        for on_node, elsewhere in ((ON_NODE, 0), (ON_NODE, 10_000), (BUSY_NODE, 10_000))
        for protobuf in (True, False)
    ]
    summarize(rows)
    return rows


def summarize(rows: list[dict[str, Any]]) -> None:
    """Chart and table of ``rows`` plus the last storm peaks (re-runnable from saved results)."""
    peaks = _storm_peaks()
    _chart(rows, peaks)
    lines = [
        "Command: `tox -e bench -- memory` (as root). VmRSS of the daemon process, idle 3 s after",
        "it started serving, configured as deployed: auto mode (generated config, conf-dir watch),",
        "a readiness indicator, the pod cache filtered to its node (`MULTUS_NODE_NAME`). Storm",
        "peaks (VmHWM) from the last `qps_storm` run.",
        "",
        "| pods on this node | pods elsewhere | pods read as | daemon RSS MiB |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['on_node']:,} | {r['elsewhere']:,} | {r['encoding']} | {r['rss_mib']:.1f} |"
        for r in rows
    ]
    if peaks:
        lines += ["", "| storm | daemon RSS before → peak MiB |", "|---|---|"]
        lines += [
            f"| {name.replace(chr(10), ', ')} | {b:.1f} → {p:.1f} |"
            for name, (b, p) in peaks.items()
        ]
    lines += ["", "![Daemon RSS idle and during the storms](images/memory.png)"]
    table = "\n".join(lines)
    report("memory", table, {"rows": rows, "storm_peaks": peaks})
