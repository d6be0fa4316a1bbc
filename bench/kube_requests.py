"""Issue 4 benchmark: what a pod's ADD and DEL cost the API server, and the request rate of a
mass deletion. The real daemon (a subprocess) and the real shim run against the API emulator
in this process; the emulator's request log is the measurement."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import PLUGIN_DIR, REPO, Stats, namespaces, proc_mib, report, short_id
from multusd.kubesim import KubeSim, Settings
from multusd.shim_install import install_shim

NODE = "bench-node"
SUBNET = "10.253.0.0/16"


async def sh(*cmd: str) -> None:
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL)  # fmt: skip
    await proc.wait()


async def run_shim(shim: Path, command: str, conf: bytes, env: dict[str, str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        str(shim), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**env, "CNI_COMMAND": command},
    )  # fmt: skip
    await proc.communicate(conf)
    return proc.returncode or 0


def pod_env(ns: str, pod: str, uid: str) -> dict[str, str]:
    """The CNI environment of pod ``pod`` whose namespace is pinned on the file ``ns``
    (``bench.common.netns``)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "CNI_CONTAINERID": f"c{pod}",
        "CNI_NETNS": ns,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": PLUGIN_DIR,
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};"
        f"K8S_POD_INFRA_CONTAINER_ID=c{pod};K8S_POD_UID={uid}",
    }


class Rig:
    """Emulator + daemon + installed shim + a bridge cluster network, in a temp dir."""

    def __init__(self, sim: KubeSim, workdir: Path, *, loop: str = "asyncio", **extra: Any) -> None:
        self.sim, self.workdir, self.extra, self.loop = sim, workdir, extra, loop
        self.bridge = f"mbk{short_id()[:6]}"
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Rig:
        w = self.workdir
        (w / "net.d").mkdir()
        conflist = {
            "cniVersion": "1.0.0", "name": "benchnet",
            "plugins": [{"type": "bridge", "bridge": self.bridge,
                         "ipam": {"type": "host-local", "dataDir": str(w / "ipam"),
                                  "ranges": [[{"subnet": SUBNET}]]}}],
        }  # fmt: skip
        (w / "net.d" / "10-bench.conflist").write_text(json.dumps(conflist))
        kubeconfig = await self.sim.write_kubeconfig(w / "kubeconfig")
        config = {
            "cniVersion": "1.0.0", "multusConfigFile": str(w / "net.d" / "00-multus.conf"),
            "socketDir": str(w / "run"), "binDir": PLUGIN_DIR, "cniDir": str(w / "cache"),
            "clusterNetwork": str(w / "net.d" / "10-bench.conflist"), "kubeconfig": str(kubeconfig),
            **self.extra,
        }  # fmt: skip
        self._config = config
        self.shim = await asyncio.to_thread(install_shim, w / "bin")
        self.shim_conf = json.dumps({"cniVersion": "1.0.0", "name": "multus-cni-network",
                                     "type": "multus-shim", "daemonSocketDir": str(w / "run")}
                                    ).encode()  # fmt: skip
        await self._start_daemon()
        return self

    async def _start_daemon(self) -> None:
        w = self.workdir
        (w / "daemon.json").write_text(json.dumps(self._config))
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "multusd", "--config", str(w / "daemon.json"),
            "--loop", self.loop, cwd=REPO,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "MULTUS_NODE_NAME": NODE},
        )  # fmt: skip
        for _ in range(600):
            if (w / "run" / "multus.sock").exists():
                break
            await asyncio.sleep(0.05)

    async def _stop_daemon(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            await self.proc.wait()
            self.proc = None

    async def restart(self, **extra: Any) -> None:
        """The daemon again with ``extra`` config keys; result cache, IPAM and netns stay."""
        await self._stop_daemon()
        self._config = {**self._config, **extra}
        await self._start_daemon()

    async def __aexit__(self, *exc: object) -> None:
        await self._stop_daemon()
        await sh("ip", "link", "del", self.bridge)

    def create_pod(self, name: str) -> str:
        pod = self.sim.create({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
        })  # fmt: skip
        return str(pod["metadata"]["uid"])

    async def cached_pods(self, count: int) -> list[tuple[str, str]]:
        """``count`` new pods on this node, as (name, uid), once the watch has delivered them."""
        pods = [(n, self.create_pod(n)) for n in (f"p{short_id()[:8]}" for _ in range(count))]
        await asyncio.sleep(1.0)
        return pods

    @contextlib.asynccontextmanager
    async def netns_envs(self, pods: list[tuple[str, str]]) -> AsyncIterator[list[dict[str, str]]]:
        """A fresh network namespace per pod (16 created at a time), pinned on files of the
        work dir, as CNI environments; the namespaces are removed on exit."""
        async with namespaces(self.workdir / "netns", len(pods)) as paths:
            yield [pod_env(ns, n, u) for (n, u), ns in zip(pods, paths, strict=True)]


def _counts(sim: KubeSim) -> Counter[str]:
    out: Counter[str] = Counter()
    for record in sim.stats.requests():
        key = f"{record.verb} {record.resource}" + (
            f"/{record.subresource}" if record.subresource else ""
        )
        out[key] += 1
    return out


async def per_pod(sim: KubeSim, rig: Rig, pairs: int) -> dict[str, float]:
    """API requests of ADD+DEL pairs for pods already in the cache."""
    pods = [(f"p{i}-{short_id()[:4]}", "") for i in range(pairs)]
    pods = [(name, rig.create_pod(name)) for name, _ in pods]
    await asyncio.sleep(1.0)  # let the watch deliver them
    async with namespaces(rig.workdir / "netns", len(pods)) as paths:
        sim.stats.reset()
        for (name, uid), ns in zip(pods, paths, strict=True):
            env = pod_env(ns, name, uid)
            assert await run_shim(rig.shim, "ADD", rig.shim_conf, env) == 0
            assert await run_shim(rig.shim, "DEL", rig.shim_conf, env) == 0
    counts = _counts(sim)
    return {k: v / pairs for k, v in sorted(counts.items()) if not k.startswith("watch")}


async def timed_shim(rig: Rig, command: str, env: dict[str, str]) -> float:
    """Seconds one shim call took; it must succeed."""
    start = time.perf_counter()
    assert await run_shim(rig.shim, command, rig.shim_conf, env) == 0
    return time.perf_counter() - start


async def events_posted(sim: KubeSim, count: int) -> None:
    """Until the daemon's background event posts (one per ADD) have all reached the API."""
    async with asyncio.timeout(600):
        while sim.stats.count("create", "events") < count:
            await asyncio.sleep(0.1)


def per_second(sim: KubeSim, since: float) -> list[int]:
    """Requests (watches excluded) in each second after ``since``."""
    stamps = [r.started - since for r in sim.stats.requests() if r.verb != "watch"]
    counts = [0] * (int(max(stamps, default=0)) + 1)
    for t in stamps:
        counts[max(0, int(t))] += 1
    return counts


async def deletion_storm(sim: KubeSim, rig: Rig, count: int, **switches: Any) -> dict[str, Any]:
    """ADD ``count`` pods, 16 at a time, delete them from the API, then DEL them all at once;
    with ``switches``, the daemon is restarted with those config keys before the DELs."""
    pods = await rig.cached_pods(count)
    async with rig.netns_envs(pods) as envs:
        limit = asyncio.Semaphore(16)

        async def add(env: dict[str, str]) -> None:
            async with limit:
                await timed_shim(rig, "ADD", env)

        sim.stats.reset()
        start = time.monotonic()
        await asyncio.gather(*(add(env) for env in envs))
        add_seconds = time.monotonic() - start
        await events_posted(sim, count)
        add_requests, add_peak = _rate(sim)
        if switches:
            await rig.restart(**switches)
        assert rig.proc is not None
        for name, _ in pods:
            sim.delete("pods", "default", name)
        await asyncio.sleep(1.0)  # the watch delivers the deletions, as it would in a cluster
        rss_before = proc_mib(pid=rig.proc.pid)
        sim.stats.reset()
        since = time.monotonic()
        dels = await asyncio.gather(*(timed_shim(rig, "DEL", env) for env in envs))
        wall = time.monotonic() - since
        requests, peak = _rate(sim)
        pod_gets = sim.stats.count("get", "pods")
        rate = per_second(sim, since)
        rss_peak = proc_mib("VmHWM", pid=rig.proc.pid)
    return {
        "pods": count,
        "add_seconds": add_seconds,
        "add_requests": add_requests,
        "add_peak_per_second": add_peak,
        "wall_s": wall,
        "latency": asdict(Stats.of(dels)),
        "requests": requests,
        "pod_gets": pod_gets,
        "peak_per_second": peak,
        "requests_per_second": rate,
        "daemon_rss_before_mib": rss_before,
        "daemon_rss_peak_mib": rss_peak,
    }


def _rate(sim: KubeSim) -> tuple[int, int]:
    """Requests (watches excluded) since the last reset, and the most in any 1-second window."""
    stamps = sorted(r.started for r in sim.stats.requests() if r.verb != "watch")
    peak = max((sum(1 for t in stamps if s <= t < s + 1.0) for s in stamps), default=0)
    return len(stamps), peak


async def run(pairs: int, storm: int) -> dict[str, Any]:
    async with KubeSim(Settings(bookmark_interval=5.0)) as sim:
        with tempfile.TemporaryDirectory(prefix="mbk-", dir="/tmp") as tmp:
            async with Rig(sim, Path(tmp)) as rig:
                costs = await per_pod(sim, rig, pairs)
                storm_result = await deletion_storm(sim, rig, storm)
    return {"per_add_del_pair": costs, "deletion_storm": storm_result}


def main(pairs: int = 30, storm: int = 500) -> dict[str, Any]:
    data = asyncio.run(run(pairs, storm))
    costs, st = data["per_add_del_pair"], data["deletion_storm"]
    rows = "\n".join(f"| `{k}` | {v:.2f} |" for k, v in costs.items()) or "| (none) | 0 |"
    table = f"""Command: `tox -e bench -- kube_requests` (as root). {pairs} ADD+DEL pairs for pods
already in the watch cache, counted from the emulator's request log (watch streams excluded).
For comparison, upstream at the seed commit costs 3 pod GETs, 1 `pods/status` PUT and 1 event
POST per pair (as measured for issue 4).

| request (verb resource) | per ADD+DEL pair |
|---|---|
{rows}

Creation: {st["pods"]} pods ADDed, 16 at a time: {st["add_seconds"]:.1f} s wall time,
{st["add_requests"]} API requests (a status PATCH and an `AddedInterface` event per pod), peak
{st["add_peak_per_second"]} in any 1-second window.
Deletion storm: the {st["pods"]} pods deleted from the API, then {st["pods"]} DELs at once through
the shim: {st["wall_s"]:.1f} s wall time, {st["requests"]} API requests in total,
peak {st["peak_per_second"]} in any 1-second window. The token bucket allows 50/s after a burst
of 50; DEL reads the pod from the cache only, so a deletion storm costs the API server nothing."""
    report("kube_requests", table, data)
    return data
