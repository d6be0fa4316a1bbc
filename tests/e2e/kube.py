"""The Kubernetes side of the end-to-end tests, in one place: pods on the test node, the daemon
started against the API emulator, the CNI environment that names a pod by its real UID, a
kubeconfig whose API server is never there, and what ``/readyz`` says about the caches.

Every test file that drives the daemon against ``multusd.kubesim`` used to carry its own copy of
these; a change to how a pod or a kubeconfig is written now has one place to go."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from multusd.kubesim import KubeSim
from tests.e2e.conftest import pod_env
from tests.e2e.harness import Daemon
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
NODE = "node-e2e"  # MULTUS_NODE_NAME of every daemon started here, and its pods' nodeName
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"

# Port 1 on loopback: nothing listens, so every request fails at once with a transport error.
UNREACHABLE_KUBECONFIG = (
    "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
    "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
    "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
)


def create_pod(kubesim: KubeSim, name: str, namespace: str = "default", **annotations: str) -> str:
    """Create a pod on the test node; returns the UID the API server gave it (the one a CNI
    request must name for the daemon's UID check to pass)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = annotations
    pod = kubesim.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
        }
    )
    return str(pod["metadata"]["uid"])


def uid_env(netns_name: str, pod: str, uid: str, namespace: str = "default") -> dict[str, str]:
    """``pod_env`` for a pod that exists in the emulator: its namespace, name and real UID."""
    env = pod_env(netns_name, pod=pod)
    env["CNI_ARGS"] = (
        f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={pod};"
        f"K8S_POD_INFRA_CONTAINER_ID={env['CNI_CONTAINERID']};K8S_POD_UID={uid}"
    )
    return env


async def start_kube(
    start_daemon: StartDaemon, kubesim: KubeSim, workdir: Path, conflist: Path, **extra: Any
) -> Daemon:
    """A daemon on the test node with the emulator's kubeconfig and ``conflist`` as the cluster
    network; ``extra`` are more daemon config keys."""
    kubeconfig = await kubesim.write_kubeconfig(workdir / "kubeconfig")
    return await start_daemon(
        env={"MULTUS_NODE_NAME": NODE},
        kubeconfig=str(kubeconfig),
        clusterNetwork=str(conflist),
        **extra,
    )


def unreachable_kubeconfig(workdir: Path) -> Path:
    """A kubeconfig in ``workdir`` whose API server is never there."""
    path = workdir / "kubeconfig"
    path.write_text(UNREACHABLE_KUBECONFIG)
    return path


async def readyz(daemon: Daemon) -> tuple[int, str]:
    """``/readyz``'s status and what it says about the caches."""
    status, body = await daemon.request("GET", "/readyz")
    return status, str(json.loads(body)["caches"])


async def until_caches(daemon: Daemon, done: Callable[[str], bool], timeout: float = 60) -> None:
    """Poll ``/readyz`` (bounded) until ``done`` holds for what it says about the caches."""

    async def reached() -> bool:
        return done((await readyz(daemon))[1])

    await eventually(reached, timeout, interval=0.1)
