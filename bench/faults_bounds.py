"""Part ``bounds`` of ``python -m bench faults``: what a node's hostile pod author or careless
plugin can make the daemon do, at length (issue 22; the CI rows are ``tests/e2e``'s
``test_faults_plugin_output``, ``test_faults_zombies`` and ``test_faults_pod_networks``).

* **annotation**: a pod whose ``k8s.v1.cni.cncf.io/networks`` names one NAD 43,690 times (the
  most the API server's 256 KiB of annotations allows): its ADD, the daemon's loop meanwhile
  (``/healthz`` answered), then the DEL of a delegate cache that lists 43,690 delegates (an
  older daemon's): its wall time, against the runtime's patience (the kubelet's
  ``--runtime-request-timeout``, 2 minutes).
* **output**: a delegate that prints a 10 MiB valid result, after the cluster network took an
  address, 20 times, with the daemon in a memory cgroup at the manifests' limit: OOM kills,
  the daemon's high-water mark, and what is left (caches, addresses, processes).
* **zombies**: ADD/DEL pairs through a conflist whose second plugin leaves two short-lived
  children behind each time: the daemon's zombie children at the end.

Each is bounded in count and time. Everything lives under a temp dir, the network namespaces
pinned on files of it (never ``ip netns add``); the namespaces, bridges and the cgroup are the
run's own and removed on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import call_shim, namespaces, proc_mib, short_id, workdir
from bench.kube_requests import sh
from bench.memory_limit import MemoryCgroup
from multusd.commands import scratch
from multusd.kubesim import KubeSim
from multusd.networks.delegates import delegate_from_bytes
from multusd.shim_install import install_shim
from tests.e2e.conftest import bridge_plugin, daemon_config, pod_env, shim_config, write_json
from tests.e2e.harness import Daemon
from tests.e2e.kube import uid_env

NODE = "bounds-node"
MANIFEST_LIMIT = 160 * 1024 * 1024
"""``manifests/base/daemonset.yaml``'s memory limit for the daemon's container."""
RUNTIME_PATIENCE = 120.0
"""The kubelet's ``--runtime-request-timeout`` default: how long StopPodSandbox may take."""
ANNOTATION_ELEMENTS = 43_690
LOUD_ADDS = 20
LOUD_BYTES = 10 * 1024 * 1024
ZOMBIE_PAIRS = 1_000
CALL_TIMEOUT = 150.0

LOUD_PLUGIN = f"""#!/usr/bin/python3 -I
# A chained plugin whose ADD prints a valid result of {LOUD_BYTES} bytes (its DNS search list).
import json, os, sys
conf = json.load(sys.stdin)
if os.environ.get("CNI_COMMAND") == "ADD":
    result = dict(conf.get("prevResult") or {{"cniVersion": conf["cniVersion"]}})
    result["dns"] = {{"search": ["x" * 1000] * ({LOUD_BYTES} // 1004)}}
    sys.stdout.write(json.dumps(result))
"""

LEAVING_PLUGIN = """#!/usr/bin/python3 -I
# A chained plugin that leaves two short-lived children behind on every call (they outlive it
# and are reparented to the daemon, its subreaper), and passes its prevResult on.
import json, os, subprocess, sys
conf = json.load(sys.stdin)
for _ in range(2):
    subprocess.Popen(["sleep", "0.05"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.environ.get("CNI_COMMAND") == "ADD":
    sys.stdout.write(json.dumps(conf.get("prevResult") or {"cniVersion": conf["cniVersion"]}))
"""


def _plugin(directory: Path, name: str, text: str) -> None:
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)


def _plugin_dir(w: Path) -> Path:
    """The daemon's ``binDir``: Debian's CNI plugins, linked, beside the run's own."""
    bins = w / "plugins"
    bins.mkdir()
    for plugin in Path("/usr/lib/cni").iterdir():
        (bins / plugin.name).symlink_to(plugin)
    _plugin(bins, "loud", LOUD_PLUGIN)
    _plugin(bins, "leaving", LEAVING_PLUGIN)
    return bins


async def _chain(w: Path, plugin: str, subnet: str) -> tuple[Path, dict[str, Any], Path]:
    """The installed shim, a conflist of bridge + host-local then ``plugin`` (one of the run's
    own), and the ``binDir`` that holds them."""
    shim = await asyncio.to_thread(install_shim, w / "bin")
    bridge = f"mbb{short_id()[:6]}"
    conflist = {"cniVersion": "1.0.0", "name": f"{plugin}net",
                "plugins": [bridge_plugin(bridge, w, subnet), {"type": plugin}]}  # fmt: skip
    return shim, conflist, _plugin_dir(w)


def zombie_children(pid: int) -> int:
    """How many of ``pid``'s children are zombies now."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] == "Z" and int(fields[1]) == pid:
                count += 1
    return count


def reservations(ipam: Path) -> int:
    if not ipam.is_dir():
        return 0
    return sum(1 for p in ipam.rglob("*") if p.is_file() and p.name[:1].isdigit())


@contextlib.asynccontextmanager
async def _daemon(w: Path, conflist: dict[str, Any], **config: Any) -> Any:
    bridge = conflist["plugins"][0]["bridge"]
    path = write_json(w / "net.d" / "10-bounds.conflist", conflist)
    daemon = Daemon(w, daemon_config(w, clusterNetwork=str(path), logLevel="error", **config),
                    env={"MULTUS_NODE_NAME": NODE})  # fmt: skip
    try:
        yield daemon
    finally:
        await daemon.stop()
        await sh("ip", "link", "del", bridge)


@contextlib.asynccontextmanager
async def _netns(w: Path) -> Any:
    """A network namespace pinned on a file of the work dir ``w``; yields its path."""
    async with namespaces(w / "netns", 1) as (path,):
        yield path


async def annotation() -> dict[str, Any]:
    with workdir() as w:
        shim = await asyncio.to_thread(install_shim, w / "bin")
        bridge = f"mbb{short_id()[:6]}"
        conflist = {"cniVersion": "1.0.0", "name": "boundnet",
                    "plugins": [bridge_plugin(bridge, w, "10.243.0.0/24")]}  # fmt: skip
        async with KubeSim() as sim, _netns(w) as ns:
            pod = sim.create({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "greedy", "namespace": "default", "annotations": {
                    "k8s.v1.cni.cncf.io/networks": ",".join(["n"] * ANNOTATION_ELEMENTS)}},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]},
            })  # fmt: skip
            kubeconfig = await sim.write_kubeconfig(w / "kubeconfig")
            async with _daemon(w, conflist, kubeconfig=str(kubeconfig)) as daemon:
                await daemon.start()
                conf = json.dumps(shim_config(daemon)).encode()
                uid = str(pod["metadata"]["uid"])
                env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    **uid_env(ns, "greedy", uid),
                }
                added = await call_shim(shim, "ADD", conf, env, timeout=CALL_TIMEOUT)
                cid = env["CNI_CONTAINERID"]
                cached = (daemon.cni_dir / cid).exists()
                # An older daemon's cache for the same container: 43,690 delegates.
                delegate = delegate_from_bytes(json.dumps(conflist).encode())
                await scratch.save(str(daemon.cni_dir), cid, [delegate] * ANNOTATION_ELEMENTS)
                deleted = await call_shim(shim, "DEL", conf, env, timeout=CALL_TIMEOUT)
                return {
                    "elements": ANNOTATION_ELEMENTS,
                    "add_ok": added.ok,
                    "add_wall_s": round(added.seconds, 3),
                    "add_error": added.error(),
                    "cached_after_add": cached,
                    "reservations_after_add": reservations(w / "ipam"),
                    "del_ok": deleted.ok,
                    "del_wall_s": round(deleted.seconds, 2),
                    "runtime_patience_s": RUNTIME_PATIENCE,
                    "cache_left": (daemon.cni_dir / cid).exists(),
                    "reservations_left": reservations(w / "ipam"),
                }


async def output() -> dict[str, Any]:
    with workdir() as w, MemoryCgroup(MANIFEST_LIMIT, prefix="multusd-bounds") as cgroup:
        shim, conflist, bins = await _chain(w, "loud", "10.244.0.0/24")
        async with _daemon(w, conflist, binDir=str(bins)) as daemon, _netns(w) as ns:
            await daemon.start(wait=False)
            assert daemon.proc is not None
            cgroup.procs.write_text(f"{daemon.proc.pid}\n")  # before it has imported much
            await daemon.wait_ready()
            pid = daemon.proc.pid
            hwm_before = proc_mib("VmHWM", pid=pid)
            conf = json.dumps(shim_config(daemon)).encode()
            path_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            refused = 0
            errors: list[str] = []
            for _ in range(LOUD_ADDS):
                env = {**path_env, **pod_env(ns)}
                added = await call_shim(shim, "ADD", conf, env, timeout=CALL_TIMEOUT)
                refused += not added.ok
                if not added.ok and len(errors) < 2:
                    errors.append(added.error())
                await call_shim(shim, "DEL", conf, env, timeout=CALL_TIMEOUT)
            alive = daemon.proc.returncode is None
            return {
                "adds": LOUD_ADDS,
                "bytes": LOUD_BYTES,
                "limit_mib": MANIFEST_LIMIT // (1024 * 1024),
                "cgroup_version": cgroup.version,
                "refused": refused,
                "errors": errors,
                "oom_kills": cgroup.oom_kills(),
                "daemon_alive": alive,
                "hwm_before_mib": round(hwm_before, 1),
                "hwm_after_mib": round(proc_mib("VmHWM", pid=pid), 1) if alive else None,
                "cache_left": sum(1 for p in daemon.cni_dir.glob("*") if p.is_file()),
                "reservations_left": reservations(w / "ipam"),
                "processes_left": len(cgroup.pids()) - 1,  # the daemon itself
            }


async def zombies(pairs: int = ZOMBIE_PAIRS) -> dict[str, Any]:
    with workdir() as w:
        shim, conflist, bins = await _chain(w, "leaving", "10.245.0.0/24")
        async with _daemon(w, conflist, binDir=str(bins)) as daemon, _netns(w) as ns:
            await daemon.start()
            assert daemon.proc is not None
            pid = daemon.proc.pid
            conf = json.dumps(shim_config(daemon)).encode()
            path_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            failed = 0
            start = time.perf_counter()
            for _ in range(pairs):
                env = {**path_env, **pod_env(ns)}
                for verb in ("ADD", "DEL"):
                    call = await call_shim(shim, verb, conf, env, timeout=CALL_TIMEOUT)
                    failed += not call.ok
            wall = time.perf_counter() - start
            # The last children live 50 ms; give the reaper a moment past them, then count.
            deadline = time.monotonic() + 10.0
            while zombie_children(pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            return {
                "pairs": pairs,
                "children_left_behind": 4 * pairs,
                "failed_calls": failed,
                "wall_s": round(wall, 1),
                "zombies_at_end": zombie_children(pid),
            }


async def bounds(plan: Any) -> dict[str, Any]:
    return {
        "annotation": await annotation(),
        "output": await output(),
        "zombies": await zombies(min(plan.pairs, ZOMBIE_PAIRS)),
    }


def rows(b: dict[str, Any]) -> list[str]:
    """The part's rows of docs/reliability.md's long-run table (fault, injected how, what the
    daemon did, lost)."""
    a, o, z = b["annotation"], b["output"], b["zombies"]
    add = "succeeded (!)" if a["add_ok"] else f"refused in {a['add_wall_s']} s"
    delete = "answered 0" if a["del_ok"] else "**FAILED**"
    return [
        f"| A pod asking for {a['elements']:,} networks | one NAD named {a['elements']:,} times "
        f"(the API server's 256 KiB of annotations), then the DEL of a delegate cache listing "
        f"{a['elements']:,} delegates | the ADD {add} (`{a['add_error'][-110:]}`), nothing "
        f"cached ({a['cached_after_add']}), {a['reservations_after_add']} addresses taken; the "
        f"DEL {delete} in {a['del_wall_s']} s (the runtime's patience: "
        f"{a['runtime_patience_s']:.0f} s) | "
        f"{_left(a['cache_left'], a['reservations_left'])} |",
        f"| A delegate printing a {o['bytes'] // (1024 * 1024)} MiB result | {o['adds']} ADDs, "
        f"each after the cluster network took an address, the daemon in a {o['limit_mib']} MiB "
        # Results from before the version was recorded came from the project's v1 machines.
        f"memory cgroup (the manifests' limit; cgroup v{o.get('cgroup_version', 1)}) | "
        f"{o['refused']} of {o['adds']} ADDs refused and "
        f"rolled back; **{o['oom_kills']}** OOM kills; daemon alive: {o['daemon_alive']}; its "
        f"VmHWM {o['hwm_before_mib']} → {o['hwm_after_mib']} MiB | "
        f"{_left(o['cache_left'], o['reservations_left'], o['processes_left'])} |",
        f"| Plugins leaving children behind | {z['pairs']:,} ADD/DEL pairs through a conflist "
        f"whose second plugin leaves two short-lived children on every call "
        f"({z['children_left_behind']:,} in all) | {z['failed_calls']} failed calls in "
        f"{z['wall_s']} s; **{z['zombies_at_end']}** zombies under the daemon at the end | "
        f"{_left(z['zombies_at_end'])} |",
    ]


def _left(*counts: int) -> str:
    return "nothing" if not any(counts) else "**see the figures**"


if __name__ == "__main__":  # a part alone, by hand: python -m bench.faults_bounds
    from bench.faults import Plan

    print(json.dumps(asyncio.run(bounds(Plan())), indent=2))
    sys.exit(0)
