"""Issues 4 and 8c: the pod cache's memory and (re)list time for 1k, 10k and 50k pods, with
pods read as JSON and as Kubernetes protobuf (``kubeClientProtobuf``), and the cost of the
watch that follows: every pod is then modified once (a status-annotation update, as the daemon's
own network-status writes cause) and the reflector's CPU for those watch events is measured.

The emulator runs in this process; the reflector runs in a child process so that its RSS is its
own. Memory: the store's object graph (sys.getsizeof, each object once) and the child's RSS
growth. Relist: time from run() start to synced (paged list, trimming included), and the time
of a second, 410-forced relist, with the default 50 QPS / burst 50 token bucket. The pods are
realistic (two containers, probes, env, status: ~4.7 KB of JSON each), and the cache is not
node-filtered here: this is the worst case of a daemon started without MULTUS_NODE_NAME.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from bench.common import REPO, chart, proc_mib, report
from multusd.k8s import kproto
from multusd.k8s.apiconfig import load_api_config
from multusd.k8s.client import ClientSettings, KubeClient
from multusd.k8s.reflector.base import ReflectorSettings
from multusd.k8s.reflector.loop import Reflector
from multusd.k8s.store import Store, trim_pod
from multusd.kubesim import KubeSim, podproto, protoencode
from multusd.kubesim.encoding import JSON, PROTOBUF
from multusd.kubesim.operations import create, get, update
from multusd.kubesim.resources import PODS

if TYPE_CHECKING:  # the child imports the control client itself, where it runs
    from multusd.kubesim.client import ControlClient

STATUS = json.dumps(
    [
        {
            "name": "cbr0",
            "interface": "eth0",
            "ips": ["10.244.1.17"],
            "mac": "0a:58:0a:f4:01:11",
            "default": True,
            "dns": {},
        },
        {
            "name": "default/macvlan-conf",
            "interface": "net1",
            "ips": ["192.168.1.201"],
            "mac": "86:1d:96:ff:55:0d",
            "dns": {},
        },
    ]
)


def realistic_pod(i: int) -> dict[str, Any]:
    """About the shape of docs/performance.md, "A realistic pod" (~7 KB of JSON there)."""
    name = f"app{i % 50}-7d4b9c8f6-{i:05d}"
    env = [{"name": f"VAR_{k}", "value": "x" * 20} for k in range(8)]
    container = {
        "name": "app",
        "image": "registry.example.com/team/app:1.2.3",
        "env": env,
        "resources": {
            "limits": {"cpu": "500m", "memory": "256Mi"},
            "requests": {"cpu": "100m", "memory": "128Mi"},
        },
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
        "volumeMounts": [
            {
                "name": "kube-api-access",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True,
            }
        ],
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
    }
    sidecar = dict(container, name="sidecar", image="registry.example.com/proxy:2.0")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {
                "app": f"app{i % 50}",
                "pod-template-hash": "7d4b9c8f6",
                "tier": "web",
                "team": "blue",
                "version": "1.2.3",
            },
            "annotations": {
                "k8s.v1.cni.cncf.io/networks": "macvlan-conf",
                "k8s.v1.cni.cncf.io/network-status": STATUS,
                "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8080",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"app{i % 50}-7d4b9c8f6",
                    "uid": "0f8e2c1a-1111-2222-3333-444455556666",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": f"node{i % 500}",
            "containers": [container, sidecar],
            "volumes": [
                {
                    "name": "kube-api-access",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ]
                    },
                }
            ],
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "restartPolicy": "Always",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
            "hostIP": "192.168.0.10",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                for t in (
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                    "PodReadyToStartContainers",
                )
            ],
            "containerStatuses": [
                {
                    "name": n,
                    "ready": True,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "sha256:" + "a" * 64,
                    "containerID": "containerd://" + "b" * 64,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                }
                for n in ("app", "sidecar")
            ],
        },
    }


def deep_size(root: object) -> int:
    """sys.getsizeof over the object graph, each object once (the dict keys and values)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple):
            stack.extend(obj)
    return total


async def bench_client(kubeconfig: str, protobuf: bool) -> KubeClient:
    """The client a benchmark's child process reads pods with: long request timeouts (a list
    of 50,000 pods takes a while), pods as protobuf or JSON."""
    config = await load_api_config(kubeconfig, environ={})
    return KubeClient(config, ClientSettings(request_timeout=300, protobuf_pods=protobuf))


def pods_reflector(client: KubeClient, store: Store, settings: ReflectorSettings) -> Reflector:
    """A reflector of every pod (no node selector: the emulator's pods are the load), trimmed
    as the daemon trims them."""
    return Reflector(client, "/api/v1/pods", store, trim=trim_pod, settings=settings)


async def force_relist(control: ControlClient) -> None:
    """The next watch gets a 410 and the current one ends: the reflector lists again."""
    await control.expire_next_watches(1)
    await control.drop_watches("eof")


async def child(kubeconfig: str, count: int, page_size: int, protobuf: bool) -> dict[str, Any]:
    """The reflector alone in this process (the emulator is the parent), so RSS is ours."""
    from multusd.kubesim.client import connect

    async with (
        await connect(kubeconfig) as control,
        await bench_client(kubeconfig, protobuf) as client,
    ):
        store = Store()
        reflector = pods_reflector(client, store, ReflectorSettings(page_size=page_size))
        gc.collect()
        rss0 = proc_mib()
        cpu0 = time.process_time()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        task = asyncio.create_task(reflector.run())
        await store.synced.wait()
        first = loop.time() - t0
        first_list = reflector.statistics().last_list_seconds
        first_cpu = time.process_time() - cpu0
        gc.collect()
        rss1 = proc_mib()
        deep = deep_size(store.items())
        await force_relist(control)
        while reflector.statistics().lists < 2:
            await asyncio.sleep(0.001)
        relist = reflector.statistics().last_list_seconds
        gc.collect()
        rss2 = proc_mib()
        # The watch: the parent modifies every pod once; we count the CPU to take them in.
        events0 = reflector.statistics().events
        cpu0 = time.process_time()
        t0 = loop.time()
        print("SYNCED", flush=True)
        while reflector.statistics().events < events0 + count:
            await asyncio.sleep(0.005)
        watch_cpu = time.process_time() - cpu0
        watch_wall = loop.time() - t0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert len(store) == count, (len(store), count)
        bucket = client.bucket.statistics()
    return {
        "pods": count,
        "encoding": "protobuf" if protobuf else "JSON",
        "page_size": page_size,
        "start_to_synced_s": round(first, 3),
        "first_list_s": round(first_list, 3),
        "first_list_client_cpu_s": round(first_cpu, 3),
        "relist_s": round(relist, 3),
        "store_mib": round(deep / 2**20, 2),
        "bytes_per_pod": round(deep / count),
        "rss_base_mib": round(rss0, 1),
        "rss_delta_after_list_mib": round(rss1 - rss0, 1),
        "rss_delta_after_relist_mib": round(rss2 - rss0, 1),
        "bucket_wait_s": round(bucket.total_wait, 3),
        "watch_events": count,
        "watch_wall_s": round(watch_wall, 3),
        "watch_client_cpu_s": round(watch_cpu, 3),
        "watch_cpu_us_per_event": round(watch_cpu / count * 1e6, 1),
    }


async def _wire_bytes_per_pod(sim: KubeSim, accept: str, page_size: int) -> float:
    """Bytes of one list page per pod, as the API server sends it in the ``accept`` encoding."""
    url = f"{sim.url}/api/v1/pods?limit={page_size}"
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers={"Accept": accept}) as resp,
    ):
        body = await resp.read()
    return len(body) / page_size


def _watch_bytes_per_event(sim: KubeSim, protobuf: bool) -> int:
    """Bytes of one MODIFIED watch event as the emulator frames it (the stream's own bytes)."""
    raw = get(sim.state, PODS, "default", realistic_pod(0)["metadata"]["name"]).raw
    return len((PROTOBUF if protobuf else JSON).watch_event("MODIFIED", raw))


async def _modify_every_pod(sim: KubeSim, count: int, generation: int) -> None:
    """One update per pod (its network-status annotation rewritten), yielding to the loop every
    few hundred so the watch streams flush as they would from a real API server."""
    for i in range(count):
        obj = realistic_pod(i)
        obj["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"] = STATUS.replace(
            "10.244.1.17", f"10.244.{generation}.17"
        )
        update(sim.state, PODS, "default", obj["metadata"]["name"], obj)
        if i % 200 == 199:
            await asyncio.sleep(0)


async def parent(count: int, page_size: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with KubeSim() as sim:
        for i in range(count):
            create(sim.state, PODS, "default", realistic_pod(i), keep_status=True)
        tmp = Path(tempfile.mkdtemp(dir="/tmp"))
        kubeconfig = await sim.write_kubeconfig(tmp / "kubeconfig")
        for generation, protobuf in enumerate((False, True), start=1):
            row = await _child(sim, kubeconfig, count, page_size, protobuf, generation)
            accept = protobuf.MEDIA_TYPE if protobuf else "application/json"
            row["wire_bytes_per_pod"] = round(await _wire_bytes_per_pod(sim, accept, page_size))
            row["watch_bytes_per_event"] = _watch_bytes_per_event(sim, protobuf)
            rows.append(row)
    return rows


async def _child(
    sim: KubeSim, kubeconfig: Path, count: int, page_size: int, protobuf: bool, generation: int
) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.informer",
        "--child",
        str(kubeconfig),
        str(count),
        str(page_size),
        "protobuf" if protobuf else "json",
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"SYNCED\n"
    await _modify_every_pod(sim, count, generation)
    out = await proc.stdout.read()
    assert await proc.wait() == 0
    row: dict[str, Any] = json.loads(out)
    return row


def full_pod_decode(number: int = 20_000) -> dict[str, float]:
    """One pod three ways, bytes and decode + trim µs: as the official protobuf runtime encodes
    a pod of this benchmark's shape (the tests' fixture), as the emulator encodes
    ``realistic_pod``, and ``realistic_pod`` as JSON. The first two should agree closely: the
    emulator's pods are the benchmark's protobuf rows."""
    from tests.kproto_fixtures import official_pod_bytes

    official = official_pod_bytes()
    pod = realistic_pod(7)
    emulated = protoencode.wrap("Pod", podproto.pod_message(pod))
    as_json = json.dumps(pod, separators=(",", ":")).encode()

    def per_pod(func: Any) -> float:
        return timeit.timeit(func, number=number) / number * 1e6

    return {
        "official_protobuf_bytes": len(official),
        "official_protobuf_us": per_pod(lambda: kproto.decode_pod(official)),
        "emulator_protobuf_bytes": len(emulated),
        "emulator_protobuf_us": per_pod(lambda: kproto.decode_pod(emulated)),
        "json_bytes": len(as_json),
        "json_us": per_pod(lambda: trim_pod(json.loads(as_json))),
    }


def _chart(rows: list[dict[str, Any]]) -> None:
    """Client CPU per listed pod and per watch event, JSON vs protobuf."""
    sizes = sorted({r["pods"] for r in rows})

    def series(encoding: str, key: str, per_pod: bool) -> list[float]:
        by = {r["pods"]: r for r in rows if r["encoding"] == encoding}
        return [by[n][key] * (1e6 / n if per_pod else 1) for n in sizes]

    with chart("informer", cols=2, size=(10, 3.6)) as (listing, watching):
        for ax, key, per_pod, title in (
            (listing, "first_list_client_cpu_s", True, "List: client CPU per pod, µs"),
            (watching, "watch_cpu_us_per_event", False, "Watch: client CPU per event, µs"),
        ):
            for encoding in ("JSON", "protobuf"):
                ax.plot(sizes, series(encoding, key, per_pod), marker="o", label=encoding)
            ax.set_xscale("log")
            ax.set_xlabel("pods in the cluster (cache without node filter)")
            ax.set_title(title)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        listing.legend(fontsize="small")


def main(sizes: tuple[int, ...] = (1_000, 10_000, 50_000), page_size: int = 500) -> list[Any]:
    rows = [row for n in sizes for row in asyncio.run(parent(n, page_size))]
    full = full_pod_decode()
    _chart(rows)
    lines = [
        f"Command: `tox -e bench -- informer`. Page size {page_size}; list wire bytes are of "
        "one list page, per pod. Watch: every pod then modified once; bytes of one MODIFIED "
        "event and the reflector's CPU per event (decode, trim, store).",
        "",
        "| pods | encoding | list bytes/pod | first list s | list client CPU s "
        "| relist after 410 s | watch bytes/event | watch CPU µs/event | store MiB | bytes/pod "
        "| RSS growth after list MiB | after relist MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['pods']:,} | {r['encoding']} | {r['wire_bytes_per_pod']:,} "
        f"| {r['first_list_s']:.2f} | {r['first_list_client_cpu_s']:.2f} "
        f"| {r['relist_s']:.2f} | {r['watch_bytes_per_event']:,} "
        f"| {r['watch_cpu_us_per_event']:.0f} | {r['store_mib']:.1f} | {r['bytes_per_pod']:,} "
        f"| {r['rss_delta_after_list_mib']:.0f} | {r['rss_delta_after_relist_mib']:.0f} |"
        for r in rows
    ]
    lines += [
        "",
        "One pod, in-process: the emulator's encoding against the official protobuf runtime's "
        "for a pod of the same shape.",
        "",
        "| one pod | bytes | decode + trim µs |",
        "|---|---|---|",
        f"| protobuf from the official runtime (upstream's .proto) "
        f"| {full['official_protobuf_bytes']:,} | {full['official_protobuf_us']:.1f} |",
        f"| protobuf from the emulator (`realistic_pod`) | {full['emulator_protobuf_bytes']:,} "
        f"| {full['emulator_protobuf_us']:.1f} |",
        f"| JSON (`realistic_pod`) | {full['json_bytes']:,} | {full['json_us']:.1f} |",
        "",
        "![Client CPU per listed pod and per watch event, JSON vs protobuf](images/informer.png)",
    ]
    table = "\n".join(lines)
    report("informer", table, {"rows": rows, "one_pod": full})
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        args = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "protobuf"
        print(json.dumps(asyncio.run(child(*args))))
    else:
        main()
