"""One "node" for a test: containerd (shared by the module), the daemon and the API emulator.

The tests talk to it as the kubelet would: the pod object is created in the emulator first
(name, namespace, UID, ``nodeName``, annotations), then the same metadata goes to containerd in
``RunPodSandbox``. Everything else (the CNI call, the shim, the daemon) happens because
containerd decided so.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multusd.kubesim import KubeSim
from tests.e2e.cri.containerd import Containerd
from tests.e2e.cri.criapi import CriClient, SandboxConfig
from tests.e2e.harness import Daemon
from tests.waits import eventually

NODE = "node-cri"  # the daemon's MULTUS_NODE_NAME; every pod is scheduled here
NETWORKS = "k8s.v1.cni.cncf.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
GENERATED = "00-multus.conf"
MULTUS_NETWORK = "multus-cni-network"  # the generated file's network name
_IP_FILE = re.compile(r"^[0-9a-f.:]+$")  # host-local names an allocation after its address


@dataclass
class Node:
    rig: Containerd
    cri: CriClient
    kubesim: KubeSim
    daemon: Daemon
    workdir: Path
    primary: Path  # the cluster network's conflist, in the daemon's multusAutoconfigDir
    running: set[str] = field(default_factory=set)  # sandboxes not removed yet

    @property
    def generated(self) -> Path:
        return self.rig.conf_dir / GENERATED

    @property
    def ipam_dir(self) -> Path:
        """host-local's ``dataDir`` of every network of the test (under the test's workdir)."""
        return self.workdir / "ipam"

    # ----------------------------------------------------------------------------------------
    # the daemon's generated config, as containerd sees it

    def generated_config(self) -> dict[str, Any] | None:
        """``00-multus.conf`` as this test's daemon wrote it (``None``: absent, or another's)."""
        try:
            conf = json.loads(self.generated.read_bytes())
        except (OSError, ValueError):
            return None
        mine = conf.get("daemonSocketDir") == self.daemon.socket_dir
        return dict(conf) if mine else None

    async def loaded_networks(self) -> list[str] | None:
        """The names of the networks containerd has loaded now beside its own loopback, in
        its order (``None``: its network is not ready, e.g. no config at all)."""
        status = await self.cri.status()
        ready, _ = status.conditions.get("NetworkReady", (False, ""))
        if not ready:
            return None
        networks = status.cni_config().get("Networks") or []
        return [n["Config"]["Name"] for n in networks if n.get("IFName") != "lo"]

    async def loaded_config(self) -> dict[str, Any] | None:
        """The multus config containerd has loaded now (verbose ``Status``), if ready."""
        status = await self.cri.status()
        ready, _ = status.conditions.get("NetworkReady", (False, ""))
        if not ready:
            return None
        for network in status.cni_config().get("Networks") or []:
            for plugin in network["Config"]["Plugins"]:
                if plugin["Network"]["type"] == "multus-shim":
                    return dict(json.loads(plugin["Source"]))
        return None

    async def wait_config_loaded(self, timeout: float = 30) -> dict[str, Any]:
        """Wait until this daemon wrote ``00-multus.conf`` and containerd reloaded that very
        content (containerd watches its conf_dir; nobody restarts it); return it."""
        await eventually(self.generated_config, timeout, what=f"{self.generated} from this daemon")

        async def same() -> dict[str, Any] | None:
            current = self.generated_config()
            return (
                current if current is not None and await self.loaded_config() == current else None
            )

        try:
            return dict(await eventually(same, timeout, what="containerd loading it"))
        except AssertionError as exc:
            raise AssertionError(
                f"containerd did not load {self.generated} within {timeout}s: "
                f"file {self.generated_config()}, loaded {await self.loaded_config()}\n"
                f"{self.rig.log(20)}"
            ) from exc

    async def restart_daemon(self) -> None:
        """SIGTERM, start again with the same config, wait until containerd has the file."""
        code = await self.daemon.stop()
        assert code == 0, f"daemon exited {code}: {self.daemon.log()[-2000:]}"
        await self.daemon.start()
        await self.wait_config_loaded()

    # ----------------------------------------------------------------------------------------
    # pods

    def create_pod(self, name: str, namespace: str = "default", **annotations: str) -> str:
        """The pod object, scheduled on our node; returns the UID the API server gave it."""
        pod = self.kubesim.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            }
        )
        return str(pod["metadata"]["uid"])

    async def run_pod(self, name: str, namespace: str = "default", **annotations: str) -> str:
        """Create the pod, then ``RunPodSandbox`` with its metadata; the sandbox id."""
        uid = self.create_pod(name, namespace, **annotations)
        return await self.run_sandbox(SandboxConfig(name, uid, namespace, annotations=annotations))

    async def run_sandbox(self, config: SandboxConfig) -> str:
        """``RunPodSandbox`` for a pod already created (a kubelet's retry passes the next
        ``attempt``); the sandbox id."""
        sandbox_id = await self.cri.run(config)
        self.running.add(sandbox_id)
        return sandbox_id

    async def stop_pod(self, sandbox_id: str) -> None:
        await self.cri.stop(sandbox_id)

    async def remove_pod(self, sandbox_id: str) -> None:
        """Stop then remove, as the kubelet does (both tear the network down)."""
        await self.cri.stop(sandbox_id)
        await self.cri.remove(sandbox_id)
        self.running.discard(sandbox_id)

    def bridge_nad(self, name: str, bridge: str, subnet: str, namespace: str = "default") -> None:
        """A NetworkAttachmentDefinition for a bridge + host-local network whose addresses go
        under :attr:`ipam_dir` (no routes: the default route stays on ``eth0``)."""
        ipam = {
            "type": "host-local",
            "dataDir": str(self.ipam_dir),
            "ranges": [[{"subnet": subnet}]],
        }
        config = {"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge, "ipam": ipam}
        self.kubesim.create(
            {
                "apiVersion": "k8s.cni.cncf.io/v1",
                "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"config": json.dumps(config)},
            }
        )

    def pod_annotation(self, name: str, key: str, namespace: str = "default") -> str | None:
        pod = self.kubesim.get("pods", namespace, name)
        value = pod["metadata"].get("annotations", {}).get(key)
        return None if value is None else str(value)

    # ----------------------------------------------------------------------------------------
    # what is left on the node

    async def addresses(self, sandbox_id: str) -> dict[str, list[str]]:
        """``{ifname: ["10.0.0.2/24", ...]}``: IPv4 addresses inside the sandbox's network
        namespace, ``lo`` left out (the kernel adds IPv6 link-local ones by itself)."""
        path = (await self.cri.sandbox_status(sandbox_id)).netns_path()
        proc = await asyncio.create_subprocess_exec(
            "nsenter", f"--net={path}", "ip", "-j", "addr",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 0, f"nsenter --net={path}: {err.decode()}"
        return {
            link["ifname"]: [
                f"{a['local']}/{a['prefixlen']}"
                for a in link.get("addr_info", [])
                if a["family"] == "inet"
            ]
            for link in json.loads(out)
            if link["ifname"] != "lo"
        }

    def allocations(self) -> dict[str, list[str]]:
        """host-local's allocations, per network (``dataDir/<network>/<ip>`` files)."""
        if not self.ipam_dir.is_dir():
            return {}
        found = {
            network.name: sorted(f.name for f in network.iterdir() if _IP_FILE.match(f.name))
            for network in self.ipam_dir.iterdir()
        }
        return {name: ips for name, ips in found.items() if ips}

    def netns_files(self) -> list[str]:
        directory = self.rig.netns_dir
        return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []

    def delegate_caches(self) -> list[str]:
        """The daemon's delegate cache files (``<cniDir>/<containerID>``)."""
        directory = self.daemon.cni_dir
        return (
            sorted(p.name for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []
        )

    def daemon_results(self) -> list[str]:
        """The daemon's own libcni result cache (``<cniDir>/results``), one per delegate."""
        directory = self.daemon.cni_dir / "results"
        return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []

    def runtime_cache(self, sandbox_id: str) -> dict[str, Any] | None:
        """containerd's (libcni's) record of the ADD it made for the sandbox: ``config`` (here
        the one plugin of the list libcni made of ``00-multus.conf``: what the shim got on
        stdin, before libcni added runtime keys), ``cniArgs`` (pairs, in no fixed order),
        ``result``; ``None`` once a DEL succeeded. containerd's ``/var/lib/cni/results`` is
        :attr:`Containerd.cni_results` (private to it)."""
        path = self.rig.cni_results / f"{MULTUS_NETWORK}-{sandbox_id}-eth0"
        try:
            entry = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        [entry["config"]] = json.loads(base64.b64decode(entry["config"]))["plugins"]
        return dict(entry)

    def runtime_cache_files(self) -> list[str]:
        """containerd's cache entries (``<network>-<id>-<ifname>``): every one is the rig's."""
        directory = self.rig.cni_results
        return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []

    def shim_calls(self) -> list[tuple[str, str]]:
        """``(CNI_COMMAND, K8S_POD_NAME)`` of every shim containerd is running right now (read
        from ``/proc``: the runtime execs ``<bin_dir>/multus-shim``)."""
        shim = str(self.rig.bin_dir / "multus-shim").encode()
        calls: list[tuple[str, str]] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if shim not in (entry / "cmdline").read_bytes().split(b"\0"):
                    continue
                raw = (entry / "environ").read_bytes()
            except OSError:
                continue  # gone meanwhile
            env = dict(v.decode().partition("=")[::2] for v in raw.split(b"\0") if b"=" in v)
            args = dict(a.partition("=")[::2] for a in env.get("CNI_ARGS", "").split(";"))
            calls.append((env.get("CNI_COMMAND", ""), args.get("K8S_POD_NAME", "")))
        return calls

    def daemon_requests(self, command: str, container_id: str) -> list[str]:
        """The daemon's one log line per answered request of ``command`` for the container."""
        marker = f"/cni {command} container={container_id} "
        return [line for line in self.daemon.log().splitlines() if marker in line]


def in_subnet(cidr: str, subnet: str) -> bool:
    return ipaddress.ip_interface(cidr).ip in ipaddress.ip_network(subnet)
