"""Daemon memory at idle: RSS of the real daemon process connected to the API emulator, with
110 pods on its node and many more elsewhere in the cluster (upstream's daemon idles at ~44 MiB
with 1,500 pods in the API, as measured for issue 4)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import PLUGIN_DIR, REPO, proc_mib, publish, save
from multusd.kubesim import KubeSim, Settings
from multusd.kubesim.operations import create
from multusd.kubesim.resources import PODS

NODE = "mem-node"
ON_NODE = 110


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


async def measure(elsewhere: int) -> dict[str, float]:
    async with KubeSim(Settings(bookmark_interval=30.0)) as sim:
        for i in range(ON_NODE):
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
                "kubeconfig": str(kubeconfig),
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
    return {"on_node": ON_NODE, "elsewhere": elsewhere, "rss_mib": rss}


def main() -> list[dict[str, float]]:
    rows = [asyncio.run(measure(n)) for n in (0, 1_390, 10_000, 50_000)]
    lines = [
        "Command: `tox -e bench -- memory` (as root). VmRSS of the daemon process, idle 3 s after",
        "it started serving, configured as deployed: auto mode (generated config, conf-dir watch),",
        "a readiness indicator, the pod cache filtered to its node (`MULTUS_NODE_NAME`).",
        "",
        "| pods on this node | pods elsewhere | daemon RSS MiB |",
        "|---|---|---|",
    ]
    lines += [f"| {r['on_node']} | {r['elsewhere']:,} | {r['rss_mib']:.1f} |" for r in rows]
    table = "\n".join(lines)
    publish("memory", table)
    save("memory", {"rows": rows})
    print(table)
    return rows
