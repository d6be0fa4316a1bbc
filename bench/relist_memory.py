"""Issue 13 item 6: what a (re)list of 10,000 pods costs the reflector's process in memory, for
each way of listing, and whether that memory comes back.

The emulator runs in this process; the reflector runs alone in a child process, so that the
RSS is its own. Three lists per child, each measured by its RSS growth over the child's base
(after ``gc.collect()``) and its peak (``VmHWM``, reset before each phase through
``/proc/self/clear_refs``):

1. the first list, into an empty cache;
2. a relist after a 410 where nothing changed (every object comes back with the same UID and
   version);
3. a relist where every object is new: the emulator is restored from a backup with new UIDs
   (``KubeSim.restore(new_uids=True)``), as after an etcd restore whose pods were re-created.

Then ``malloc_trim(0)`` shows how much of what is left the C allocator still held. Ways of
listing: paged (``limit=500``), paged as kube-apiserver really answers the first list (its
watch cache serves resourceVersion "0" whole, ignoring ``limit``), and the streaming list
(``sendInitialEvents``); each with pods read as JSON and as protobuf. The pods are
``bench.informer``'s realistic ones (~4.7 KB of JSON each), none node-filtered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import REPO, proc_mib, report
from bench.informer import bench_client, deep_size, force_relist, pods_reflector, realistic_pod
from multusd.k8s.reflector.base import ReflectorSettings
from multusd.k8s.store import Store
from multusd.kubesim import KubeSim
from multusd.kubesim.operations import create
from multusd.kubesim.resources import PODS

MODES = {
    "paged": (False, False),  # streaming, the server answers resourceVersion 0 whole
    "paged, RV 0 whole": (False, True),
    "streaming": (True, False),
}


def _reset_peak() -> None:
    """Start VmHWM over from the current RSS (Linux 4.0+: ``clear_refs`` value 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def _measure(base: float) -> tuple[float, float]:
    gc.collect()
    return proc_mib() - base, proc_mib("VmHWM") - base


async def _wait(predicate: Any) -> None:
    async with asyncio.timeout(600):
        while not predicate():
            await asyncio.sleep(0.01)


async def child(kubeconfig: str, count: int, streaming: bool, protobuf: bool) -> dict[str, Any]:
    from multusd.kubesim.client import connect

    async with (
        await connect(kubeconfig) as control,
        await bench_client(kubeconfig, protobuf) as client,
    ):
        store = Store()
        reflector = pods_reflector(client, store, ReflectorSettings(streaming=streaming))
        gc.collect()
        base = proc_mib()
        _reset_peak()
        task = asyncio.create_task(reflector.run())
        await store.synced.wait()
        first, first_peak = _measure(base)
        first_s = reflector.statistics().last_list_seconds
        store_mib = deep_size(store.items()) / 2**20

        _reset_peak()
        await force_relist(control)
        await _wait(lambda: reflector.statistics().lists >= 2)
        same, same_peak = _measure(base)

        async def all_new(lists: int) -> tuple[float, float]:
            old_uids = {o["metadata"]["uid"] for o in store.items()}
            _reset_peak()
            await control.snapshot()
            await control.restore(new_uids=True)
            await _wait(
                lambda: (
                    reflector.statistics().lists >= lists
                    and len(store) == count
                    and not old_uids & {o["metadata"]["uid"] for o in store.items()}
                )
            )
            return _measure(base)

        new, new_peak = await all_new(3)
        again, again_peak = await all_new(4)
        stats = reflector.statistics()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return {
        "pods": count,
        "encoding": "protobuf" if protobuf else "JSON",
        "streaming": stats.streaming,
        "first_list_s": round(first_s, 2),
        "store_mib": round(store_mib, 1),
        "rss_base_mib": round(base, 1),
        "first_mib": round(first, 1),
        "first_peak_mib": round(first_peak, 1),
        "same_mib": round(same, 1),
        "same_peak_mib": round(same_peak, 1),
        "new_mib": round(new, 1),
        "new_peak_mib": round(new_peak, 1),
        "again_mib": round(again, 1),
        "again_peak_mib": round(again_peak, 1),
        "lists": stats.lists,
    }


async def _child(kubeconfig: Path, count: int, streaming: bool, protobuf: bool) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.relist_memory",
        "--child",
        str(kubeconfig),
        str(count),
        "streaming" if streaming else "paged",
        "protobuf" if protobuf else "json",
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out
    row: dict[str, Any] = json.loads(out)
    return row


async def parent(count: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with KubeSim() as sim:
        for i in range(count):
            create(sim.state, PODS, "default", realistic_pod(i), keep_status=True)
        tmp = Path(tempfile.mkdtemp(dir="/tmp"))
        kubeconfig = await sim.write_kubeconfig(tmp / "kubeconfig")
        defaults = sim.state.settings
        for mode, (streaming, whole) in MODES.items():
            sim.state.settings = dataclasses.replace(defaults, watch_cache_ignores_limit=whole)
            for protobuf in (False, True):
                sim.snapshot()  # what the child's third relist restores, with new UIDs
                row = await _child(kubeconfig, count, streaming, protobuf)
                row["mode"] = mode
                rows.append(row)
    return rows


def main(count: int = 10_000) -> list[dict[str, Any]]:
    rows = asyncio.run(parent(count))
    lines = [
        "Command: `tox -e bench -- relist_memory`. The reflector alone in a process, "
        f"{count:,} realistic pods (not node-filtered); RSS growth over the process's base, "
        "after each list, and (in brackets) its peak during that list. Relists: after a 410 "
        "with nothing changed, then after a restore that gave every pod a new UID.",
        "",
        "| list | pods read as | store MiB | first list MiB (peak) | relist, same objects "
        "MiB (peak) | relist, all new MiB (peak) | once more, all new MiB (peak) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['mode']} | {r['encoding']} | {r['store_mib']:.1f} "
        f"| {r['first_mib']:.0f} ({r['first_peak_mib']:.0f}) "
        f"| {r['same_mib']:.0f} ({r['same_peak_mib']:.0f}) "
        f"| {r['new_mib']:.0f} ({r['new_peak_mib']:.0f}) "
        f"| {r['again_mib']:.0f} ({r['again_peak_mib']:.0f}) |"
        for r in rows
    ]
    report("relist_memory", "\n".join(lines), {"rows": rows})
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        args = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "streaming", sys.argv[5] == "protobuf"
        print(json.dumps(asyncio.run(child(*args))))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
