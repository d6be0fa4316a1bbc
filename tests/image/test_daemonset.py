"""The DaemonSet's containers, from the built image, under containerd as a kubelet runs them.

``manifests/kind`` as ``kubectl apply -k`` sends it: ``manifests/base`` with the image named as
``tox -e image`` builds it and one more init container (tests/manifests/test_kind.py holds the
overlay to exactly that), every container config made from the manifests by
:mod:`tests.image.kubelet`, on a node that has kind's four plugins. The init containers install
``multus-shim`` (with its private interpreter) into the node's ``/opt/cni/bin`` and copy the
image's plugins the node lacks, never replacing one it has; the daemon starts with host networking,
privileged, reads ``daemon-config.json`` from the ConfigMap's volume, talks to the API emulator
with the in-cluster config, answers the probes' HTTP GETs on ``127.0.0.1:healthPort`` and writes
``00-multus.conf`` into the node's ``/etc/cni/net.d``. Then a pod's sandbox, created through
CRI, gets its networks from the installed shim and the daemon in the container, and its removal
leaves nothing behind. Any disagreement between the manifests and the image (a path, a mount,
the entrypoint, an argument) fails here.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multusd.kubesim import KubeSim
from tests.e2e.cri.criapi import (
    CONTAINER_EXITED,
    CONTAINER_RUNNING,
    ContainerStatus,
    CriClient,
    SandboxConfig,
    read_container_log,
)
from tests.e2e.harness import PLUGIN_DIR, http_get, short_id
from tests.image.build import IMAGE
from tests.image.kubelet import Pod, PodConfigs, pod_configs, probes
from tests.image.node import NodeContainerd
from tests.kubesim.conftest import KubectlBinary
from tests.manifests.helpers import KIND, host_path, kustomize
from tests.manifests.test_kind import INIT as KIND_INIT
from tests.manifests.test_kind import KIND_NODE_PLUGINS
from tests.waits import eventually

NODE = "node-image"
DEADLINE = 120  # the daemon's start in a container on a loaded machine; only stops a hang
SUBNET = "10.253.0.0/24"
NAD_SUBNET = "10.253.1.0/24"

Obj = dict[str, Any]


def kind_objects(
    kubectl: KubectlBinary | None, home: Path
) -> tuple[Obj, dict[str, dict[str, str]]]:
    """The DaemonSet's pod template and the ConfigMaps' data, as kind gets them."""
    objects = kustomize(kubectl, KIND, home)
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    config_maps = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
    template: Obj = daemonset["spec"]["template"]
    images = {
        c["image"] for c in [*template["spec"]["initContainers"], *template["spec"]["containers"]]
    }
    assert images == {IMAGE}, f"the kind overlay names {images}, the build makes {IMAGE}"
    return template, config_maps


def node_host_paths(template: Obj) -> tuple[Path, ...]:
    """Every ``hostPath`` the pod mounts: the node's paths the rig makes test directories."""
    return tuple(
        Path(v["hostPath"]["path"]) for v in template["spec"]["volumes"] if "hostPath" in v
    )


async def wait_state(cri: CriClient, container_id: str, state: int) -> ContainerStatus:
    async def reached() -> ContainerStatus | None:
        status = await cri.container_status(container_id)
        return status if status.state == state else None

    found: ContainerStatus = await eventually(
        reached, DEADLINE, 0.1, what=f"{container_id} in state {state}"
    )
    return found


def cluster_network(rig: NodeContainerd, bridge: str) -> Path:
    """The node's cluster network in its ``/etc/cni/net.d`` (no ``isGateway``: the root
    namespace's forwarding sysctls stay as they are); host-local leases under the node."""
    path = rig.conf_dir / "10-cluster.conflist"
    ipam = {
        "type": "host-local",
        "dataDir": str(rig.base / "ipam"),
        "ranges": [[{"subnet": SUBNET}]],
    }
    path.write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "image-cluster",
                "plugins": [{"type": "bridge", "bridge": bridge, "ipam": ipam}],
            }
        )
    )
    return path


def kind_node_plugins(rig: NodeContainerd) -> dict[str, tuple[int, int]]:
    """kind's own plugins in the node's ``/opt/cni/bin`` (copies of Debian's); each one's
    inode and mtime, which the plugin installer must leave as they are."""
    found: dict[str, tuple[int, int]] = {}
    for name in KIND_NODE_PLUGINS:
        shutil.copy2(Path(PLUGIN_DIR) / name, rig.bin_dir / name)
        st = (rig.bin_dir / name).stat()
        found[name] = (st.st_ino, st.st_mtime_ns)
    return found


def check_plugins(rig: NodeContainerd, kind_plugins: dict[str, tuple[int, int]]) -> None:
    """Every plugin of the image's (Debian's, the same build as the host's: the Containerfile
    pins it) is now on the node; kind's own were not touched."""
    for name, (inode, mtime) in kind_plugins.items():
        st = (rig.bin_dir / name).stat()
        assert (st.st_ino, st.st_mtime_ns) == (inode, mtime), f"{name} was replaced"
    for plugin in Path(PLUGIN_DIR).iterdir():
        copied = rig.bin_dir / plugin.name
        assert copied.is_file() and not copied.is_symlink(), plugin.name
        assert copied.read_bytes() == plugin.read_bytes(), plugin.name


async def pod_addresses(
    rig: NodeContainerd, cri: CriClient, sandbox_id: str
) -> dict[str, list[str]]:
    """IPv4 addresses in the pod's namespace (containerd's ``/var/run/netns/<name>`` is the
    rig's :attr:`~NodeContainerd.netns_dir` on the host)."""
    seen = Path((await cri.sandbox_status(sandbox_id, verbose=True)).netns_path())
    assert seen.parent == Path("/var/run/netns"), seen
    path = rig.netns_dir / seen.name
    out = subprocess.run(
        ["nsenter", f"--net={path}", "ip", "-j", "-4", "addr"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return {
        link["ifname"]: [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])]
        for link in json.loads(out)
        if link["ifname"] != "lo"
    }


@dataclass
class DaemonSetPod:
    """The DaemonSet's pod on the node: its CRI configs, and what the test reads of it."""

    rig: NodeContainerd
    cri: CriClient
    configs: PodConfigs
    daemon_spec: Obj
    socket_dir: str
    sandbox_id: str = ""
    daemon_id: str = ""
    daemon_log: Path | None = None

    def log(self) -> str:
        return read_container_log(self.daemon_log) if self.daemon_log else "(not started)"

    async def run_init_containers(self) -> None:
        self.sandbox_id = await self.cri.run(self.configs.sandbox)
        for init in self.configs.init_containers:
            container_id = await self.cri.create_container(
                self.sandbox_id, init, self.configs.sandbox
            )
            await self.cri.start_container(container_id)
            status = await wait_state(self.cri, container_id, CONTAINER_EXITED)
            log = read_container_log(status.log_path)
            assert status.exit_code == 0, f"{init.name} exited {status.exit_code}:\n{log}"

    async def start_daemon(self) -> None:
        """Start the daemon's container and send the probes until each answers 200."""
        (daemon,) = self.configs.containers
        self.daemon_id = await self.cri.create_container(
            self.sandbox_id, daemon, self.configs.sandbox
        )
        await self.cri.start_container(self.daemon_id)
        status = await wait_state(self.cri, self.daemon_id, CONTAINER_RUNNING)
        self.daemon_log = Path(status.log_path)
        for kind, (host, port, path) in probes(self.daemon_spec).items():
            assert host == "127.0.0.1"  # hostNetwork: the node's loopback is the test's
            await eventually(
                functools.partial(self._probe, port, path),
                DEADLINE,
                0.2,
                what=f"the {kind}'s GET {path} answered 200",
            )

    async def _probe(self, port: int, path: str) -> bool:
        current = await self.cri.container_status(self.daemon_id)
        assert current.state == CONTAINER_RUNNING, f"exited {current.exit_code}:\n{self.log()}"
        try:
            code, _ = await http_get(port, path)
        except OSError:
            return False
        return code == 200

    async def stop(self) -> int:
        """The kubelet's stop: SIGTERM, then the pod's removal; the daemon's exit code."""
        await self.cri.stop_container(self.daemon_id, 30)
        stopped = await wait_state(self.cri, self.daemon_id, CONTAINER_EXITED)
        await self.cri.remove_container(self.daemon_id)
        await self.cri.stop(self.sandbox_id)
        await self.cri.remove(self.sandbox_id)
        return stopped.exit_code


def bridge_nad(kubesim: KubeSim, name: str, bridge: str, ipam_dir: Path) -> None:
    ipam = {"type": "host-local", "dataDir": str(ipam_dir), "ranges": [[{"subnet": NAD_SUBNET}]]}
    config = {"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge, "ipam": ipam}
    kubesim.create(
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"config": json.dumps(config)},
        }
    )


def app_pod(kubesim: KubeSim, name: str, networks: str) -> SandboxConfig:
    """The pod object, scheduled on the node, and its sandbox's config (as the kubelet)."""
    annotations = {"k8s.v1.cni.cncf.io/networks": networks}
    created = kubesim.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
        }
    )
    uid = str(created["metadata"]["uid"])
    return SandboxConfig(name, uid, "default", annotations=annotations)


async def test_the_daemonset_runs_from_the_image(
    make_node: Callable[[tuple[Path, ...]], NodeContainerd],
    kustomize_bin: KubectlBinary | None,
    kubesim: KubeSim,
    tmp_path: Path,
) -> None:
    template, config_maps = kind_objects(kustomize_bin, tmp_path / "home")
    (daemon_spec,) = template["spec"]["containers"]
    daemon_config = json.loads(config_maps["multus-daemon-config"]["daemon-config.json"])
    # The socket's directory on the node (in the /run the DaemonSet mounts whole).
    socket_dir, _ = host_path(template["spec"], daemon_spec, daemon_config["socketDir"])
    rig = await asyncio.to_thread(make_node, (*node_host_paths(template), Path(socket_dir)))
    bridge, nad_bridge = f"mib{short_id()[:6]}", f"mic{short_id()[:6]}"
    cluster_network(rig, bridge)
    kind_plugins = kind_node_plugins(rig)
    account = rig.base / "serviceaccount"
    account.mkdir()
    pod = Pod(
        name="kube-multus-ds-" + short_id()[:5],
        uid=str(uuid.uuid4()),
        namespace="kube-system",
        node=NODE,
        log_directory=rig.base / "pod-logs",
        volume_dir=rig.base / "volumes",
        service_account=await kubesim.write_incluster(account, "kube-system"),
        api_env=kubesim.incluster_env(),
    )
    configs = pod_configs(template, pod, config_maps)
    try:
        async with CriClient(rig.socket) as cri:
            daemonset = DaemonSetPod(rig, cri, configs, daemon_spec, socket_dir)
            await _check_daemonset(daemonset, kubesim, kind_plugins, nad_bridge)
    finally:
        for name in (bridge, nad_bridge):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


async def _check_daemonset(
    daemonset: DaemonSetPod,
    kubesim: KubeSim,
    kind_plugins: dict[str, tuple[int, int]],
    nad_bridge: str,
) -> None:
    rig, cri = daemonset.rig, daemonset.cri
    # The init containers (in kustomize's order): the shim with its interpreter (and passthru),
    # and the plugins the node lacks, in the node's /opt/cni/bin.
    names = {c.name for c in daemonset.configs.init_containers}
    assert names == {"install-multus-shim", KIND_INIT}, names
    await daemonset.run_init_containers()
    check_plugins(rig, kind_plugins)
    shim = rig.bin_dir / "multus-shim"
    assert os.access(shim, os.X_OK), sorted(p.name for p in rig.bin_dir.iterdir())
    assert shim.read_bytes().startswith(b"#!/opt/cni/bin/multus-shim.d/")
    passthru = rig.bin_dir / "passthru"  # the auxiliary chain's plugin, on the same interpreter
    assert os.access(passthru, os.X_OK) and passthru.read_bytes().startswith(b"#!/opt/cni/bin/")

    # The daemon: the probes answered, 00-multus.conf written, the socket on the node.
    await daemonset.start_daemon()
    generated = json.loads((rig.conf_dir / "00-multus.conf").read_text())
    assert generated["type"] == "multus-shim", generated
    assert (rig.node_path(daemonset.socket_dir) / "multus.sock").exists(), daemonset.log()

    # A pod through CRI: the cluster network on eth0, the NAD on net1, the network-status.
    bridge_nad(kubesim, "extra", nad_bridge, rig.base / "ipam")
    app_id = await cri.run(app_pod(kubesim, "app", "extra"))
    addresses = await pod_addresses(rig, cri, app_id)
    assert set(addresses) == {"eth0", "net1"}, addresses
    annotations = kubesim.get("pods", "default", "app")["metadata"]["annotations"]
    status = json.loads(annotations["k8s.v1.cni.cncf.io/network-status"])
    assert [n["interface"] for n in status] == ["eth0", "net1"]
    await cri.stop(app_id)
    await cri.remove(app_id)

    # Nothing of the pod left: its namespace, its addresses, the daemon's and containerd's
    # caches.
    assert list(rig.netns_dir.iterdir()) == []
    leases = [p for p in (rig.base / "ipam").rglob("*") if p.is_file() and p.name[0].isdigit()]
    assert leases == []
    multus_cache = rig.node_path("/var/lib/cni/multus")
    assert [p for p in multus_cache.rglob("*") if p.is_file()] == [], daemonset.log()
    assert list(rig.cni_results.glob("*")) == []

    # The daemon drains on the kubelet's SIGTERM and exits 0.
    assert await daemonset.stop() == 0, daemonset.log()
