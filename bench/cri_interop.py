"""``python -m bench cri_interop --daemon PATH --shim PATH``: the four pairings through containerd.

``bench.interop`` execs the shims itself. Under the kubelet it is the container runtime that
does, and what a node being rolled shows is what *it* makes of the shim: containerd 1.6 picks
``00-multus.conf`` up from its conf dir, creates the pod's network namespace, sets the CNI
environment (``CNI_ARGS`` in its own order), keeps libcni's result cache, turns a plugin's
error into the ``RunPodSandbox`` failure the kubelet shows, and sends DEL twice (Stop, then
Remove with no namespace). So this runs pods through a real containerd and runc (the rig of
``tests/e2e/cri``: its own root, state and socket, in a mount namespace of its own), once per
pairing of shim and daemon: containerd's one CNI ``bin_dir`` holds the pairing's shim as
``multus-shim`` beside links to the real plugins, and its ``conf_dir`` the ``00-multus.conf``
the pairing's daemon generated (a crossing runs shim A with daemon B's config, whose ``type``
is ``multus-shim`` either way). Both daemons run in-cluster against one API emulator
(``bench.peer``); the pods are created there first, with the sandbox's name, namespace and UID,
on the daemons' node. The tables (``bench.interop.summarize``) show per scenario what the
runtime reports for each pairing and whether a crossing matches the same shim with its own
daemon; docs/compatibility.md ("Through containerd") explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import re
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.common import PLUGIN_DIR, short_id
from bench.interop import (
    NAD_BRIDGES,
    PAIRINGS,
    SIDES,
    Pairing,
    World,
    create_nads,
    peer_parser,
    publish_matrix,
)
from bench.peer import PeerDaemon, bridge_conflist, emulator
from multusd.fsutil import atomic_write
from multusd.kubesim import KubeSim
from multusd.shim_install import install_shim
from tests.e2e.cri import criapi
from tests.e2e.cri.containerd import Containerd, check_installed, host_snapshot, host_writes
from tests.e2e.cri.criapi import CriClient
from tests.e2e.cri.image import build_image_tar
from tests.e2e.cri.node import GENERATED, NETWORKS, NODE, Node, in_subnet
from tests.e2e.harness import Daemon

SUBNETS = {"ours": "10.248.0.0/16", "theirs": "10.246.0.0/16"}
"""Each daemon's cluster network (a bridge of its own; the same as ``bench.interop``'s)."""
NAD_SUBNETS = {"iop-a": "10.247.1.0/24", "iop-b": "10.247.2.0/24"}
"""The subnets of ``bench.interop``'s two bridge NADs."""
SHIM = "multus-shim"
MISSING = "iop-missing"
_SANDBOX_ID = re.compile(r"\b[0-9a-f]{64}\b")


@dataclass
class Runtime:
    """containerd with the pairing now in place, and what every scenario looks at."""

    rig: Containerd
    cri: CriClient
    sim: KubeSim
    workdir: Path
    node: Node | None = None
    subnet: str = ""
    ipam_dirs: list[Path] = field(default_factory=list)

    @property
    def current(self) -> Node:
        assert self.node is not None, "no pairing in place"
        return self.node

    async def use(self, pairing: Pairing) -> None:
        """Put the pairing's shim into the ``bin_dir`` and its daemon's config into the
        ``conf_dir``, and wait until containerd loaded that config.

        Both are renamed into place from a temp entry in the same directory: a running shim
        keeps its inode, and containerd 1.6's conf-dir watcher reloads on the RENAME (it
        ignores CREATE, so a file moved in from elsewhere would never be loaded)."""
        peer = pairing.peer

        def install() -> None:
            staged = self.rig.bin_dir / f".{SHIM}.{short_id()}"
            staged.symlink_to(pairing.shim_path)
            os.replace(staged, self.rig.bin_dir / SHIM)
            atomic_write(self.rig.conf_dir / GENERATED, peer.runtime_conf, mode=0o644)

        await asyncio.to_thread(install)
        # A description of the peer for the rig's Node (socket dir, cache dir, log): never
        # started from here, PeerDaemon runs it.
        daemon = Daemon(peer.workdir, dict(peer.config))
        primary = peer.conf_dir / "10-primary.conflist"
        self.node = Node(self.rig, self.cri, self.sim, daemon, peer.workdir, primary)
        self.subnet = SUBNETS[pairing.daemon]
        await self.node.wait_config_loaded()

    def world(self) -> World:
        return World(self.sim, self.workdir)

    def allocations(self) -> list[str]:
        """Every host-local allocation of the run (``<dataDir>/<network>/<ip>`` files, the
        daemons' cluster networks and the NADs): empty when every pod is gone."""
        found: list[str] = []
        for data_dir in self.ipam_dirs:
            for entry in data_dir.glob("*/*") if data_dir.is_dir() else ():
                with contextlib.suppress(ValueError):
                    ipaddress.ip_address(entry.name)
                    found.append(f"{entry.parent.name}:{entry.name}")
        return sorted(found)

    async def leftovers(self, name: str, netns_before: list[str]) -> str:
        """What is left of pod ``name`` on the node: its sandboxes, network namespaces,
        addresses; ``nothing`` when it is all gone."""
        node = self.current
        left = [f"sandbox {s.id[:12]}" for s in await self.cri.list() if s.metadata.name == name]
        left += [f"netns {n}" for n in node.netns_files() if n not in netns_before]
        left += [f"IP {a}" for a in self.allocations()]
        return ", ".join(left) or "nothing"

    async def remove(self, sandbox_id: str, name: str, netns_before: list[str]) -> str:
        """Stop and Remove, as the kubelet does; what went wrong or was left, else ``ok``."""
        try:
            await self.current.remove_pod(sandbox_id)
        except grpc.RpcError as exc:
            return f"Stop/Remove failed: {self.cause(exc, name)}"
        left = await self.leftovers(name, netns_before)
        return "ok" if left == "nothing" else f"ok, left: {left}"

    def cause(self, exc: BaseException, name: str) -> str:
        """containerd's error as the kubelet gets it, with this run's IDs and paths out."""
        text = criapi.rpc_error(exc)
        with contextlib.suppress(KeyError):
            uid = str(self.sim.get("pods", "default", name)["metadata"]["uid"])
            text = text.replace(uid, "<uid>")
        text = _SANDBOX_ID.sub("<id>", text).replace(name, "<pod>")
        return _brief(re.sub(re.escape(str(self.workdir)) + r"[^ '\"]*", "<dir>", text))


def _brief(text: str) -> str:
    """containerd's wrapping and the shim's framing (up to the request the daemon repeats,
    ``ContainerID:...``), then ``…`` and the cause: what follows the daemon's last
    ``ERRORED:``, without a shim's ``: StdinData: {...}`` suffix or the quoting a shim that
    prints a daemon's body verbatim adds (as ``bench.interop`` takes it from a shim's output)."""
    if "ERRORED: " not in text:
        return text
    head = text.split("ContainerID:", 1)[0].removesuffix("&{").rstrip()
    cause = text.split(": StdinData: {", 1)[0].rsplit("ERRORED: ", 1)[-1].replace('\\"', '"')
    cause = re.sub(r"\n?('|\"\}')$", "", cause.rstrip()).rstrip()
    return f"{head} … {cause}"


Scenario = Callable[[Runtime, Pairing], Awaitable[str]]


def _pod_name() -> str:
    return f"cri-{short_id()}"


class SandboxFailed(Exception):
    """RunPodSandbox failed where the scenario expected it to work: the scenario's answer is
    this message (``_scenarios`` records it), so each scenario words the failure the same way."""


@dataclass
class Started:
    """A pod whose sandbox runs, with what the node had before it (for ``leftovers``)."""

    node: Node
    name: str
    netns_before: list[str]
    sandbox: str


async def _run_pod(rt: Runtime, **annotations: str) -> Started:
    node, name = rt.current, _pod_name()
    netns_before = node.netns_files()
    try:
        sandbox = await node.run_pod(name, **annotations)
    except grpc.RpcError as exc:
        raise SandboxFailed(f"RunPodSandbox failed: {rt.cause(exc, name)}") from exc
    return Started(node, name, netns_before, sandbox)


async def no_annotation(rt: Runtime, p: Pairing) -> str:
    """A pod without annotations: the cluster network only, on eth0."""
    pod = await _run_pod(rt)
    node, name, sandbox = pod.node, pod.name, pod.sandbox
    status = await node.cri.sandbox_status(sandbox)
    addresses = await node.addresses(sandbox)
    eth0 = addresses.get("eth0", [])
    where = "in" if eth0 and in_subnet(eth0[0], rt.subnet) else "not in"
    same = "is" if eth0 and eth0[0].split("/")[0] == status.ip else "is not"
    return (
        f"RunPodSandbox ok; interfaces {','.join(sorted(addresses)) or '-'}; eth0 {where} the "
        f"cluster subnet, {same} the sandbox IP; Stop+Remove "
        + await rt.remove(sandbox, name, pod.netns_before)
    )


async def two_nads(rt: Runtime, p: Pairing) -> str:
    """A pod asking for two bridge NADs: eth0, net1, net2 in the sandbox, network-status."""
    pod = await _run_pod(rt, **{NETWORKS: "iop-a,iop-b"})
    name, sandbox = pod.name, pod.sandbox
    addresses = await pod.node.addresses(sandbox)
    expected = {"eth0": rt.subnet, "net1": NAD_SUBNETS["iop-a"], "net2": NAD_SUBNETS["iop-b"]}
    placed = all(
        addresses.get(ifname) and in_subnet(addresses[ifname][0], subnet)
        for ifname, subnet in expected.items()
    )
    status = rt.world().network_status(name)
    listed = ",".join(f"{n}:{i}{'*' if d else ''}" for n, i, d in status) or "-"
    return (
        f"RunPodSandbox ok; interfaces {','.join(sorted(addresses)) or '-'} "
        f"({'each in its subnet' if placed else 'NOT each in its subnet'}); "
        f"status {listed}; Stop+Remove " + await rt.remove(sandbox, name, pod.netns_before)
    )


async def missing_nad(rt: Runtime, p: Pairing) -> str:
    """A pod asking for a NAD that does not exist: the sandbox fails, naming it, and
    containerd's clean-up (a DEL) leaves nothing behind."""
    node, name = rt.current, _pod_name()
    netns_before = node.netns_files()
    try:
        sandbox = await node.run_pod(name, **{NETWORKS: MISSING})
    except grpc.RpcError as exc:
        cause = rt.cause(exc, name)
        names = "names the NAD" if MISSING in cause else "does NOT name the NAD"
        status = "written" if rt.world().network_status(name) else "none"
        left = await rt.leftovers(name, netns_before)
        return f"RunPodSandbox fails, {names}; network-status {status}; left: {left}; {cause}"
    return "RunPodSandbox ok (expected a failure); Stop+Remove " + await rt.remove(
        sandbox, name, netns_before
    )


async def stop_remove(rt: Runtime, p: Pairing) -> str:
    """StopPodSandbox (DEL with the namespace's path) frees the IP; RemovePodSandbox (DEL
    with an empty ``CNI_NETNS``) succeeds too, so the sandbox can go."""
    pod = await _run_pod(rt)
    node, name, sandbox = pod.node, pod.name, pod.sandbox
    held = "IP held" if rt.allocations() else "NO IP held"
    parts = [f"RunPodSandbox ok, {held}"]
    try:
        await node.stop_pod(sandbox)
    except grpc.RpcError as exc:
        parts.append(f"StopPodSandbox failed: {rt.cause(exc, name)}")
    else:
        freed = "IP freed" if not rt.allocations() else "IP NOT freed"
        parts.append(f"StopPodSandbox ok, {freed}")
    try:
        await node.cri.remove(sandbox)
    except grpc.RpcError as exc:
        parts.append(f"RemovePodSandbox failed: {rt.cause(exc, name)}")
    else:
        node.running.discard(sandbox)
        parts.append("RemovePodSandbox ok")
    parts.append(f"left: {await rt.leftovers(name, pod.netns_before)}")
    return "; ".join(parts)


SCENARIOS: dict[str, Scenario] = {
    "pod without annotation": no_annotation,
    "two NADs": two_nads,
    "missing NAD": missing_nad,
    "Stop, then Remove": stop_remove,
}


def _fill_bin_dir(bin_dir: Path) -> None:
    """containerd's one ``bin_dir``: links to the real plugins (its own ``loopback`` among
    them); :meth:`Runtime.use` adds the pairing's shim."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for plugin in Path(PLUGIN_DIR).iterdir():
        (bin_dir / plugin.name).symlink_to(plugin)


async def _start(rig: Containerd) -> None:
    def start() -> None:
        check_installed()
        _fill_bin_dir(rig.bin_dir)
        rig.start()
        rig.import_image(build_image_tar(rig.base / "pause.tar"))

    await asyncio.to_thread(start)


async def _scenarios(rt: Runtime, pairings: list[Pairing]) -> dict[str, dict[str, str]]:
    matrix: dict[str, dict[str, str]] = {title: {} for title in SCENARIOS}
    for pairing in pairings:
        await rt.use(pairing)
        for title, scenario in SCENARIOS.items():
            try:
                matrix[title][pairing.label] = await scenario(rt, pairing)
            except SandboxFailed as failed:
                matrix[title][pairing.label] = str(failed)
    return matrix


async def run(args: argparse.Namespace) -> dict[str, Any]:
    binaries = {"ours": Path(args.ours_daemon), "theirs": Path(args.daemon)}
    bridges = {s: f"mbc{s[0]}{short_id()[:6]}" for s in SIDES}
    host_before = await asyncio.to_thread(host_snapshot)
    with tempfile.TemporaryDirectory(prefix="mbc-", dir="/tmp") as tmp:
        w = Path(tmp)
        rig = Containerd(w / "ctrd")
        leftovers: list[str] = []
        try:
            # containerd first: the daemons' mount namespaces must be made after its netns
            # directory became a shared mount, so that the pods' namespaces reach them.
            await _start(rig)
            async with emulator(bookmark_interval=5.0) as sim, CriClient(rig.socket) as cri:
                world = World(sim, w)
                create_nads(world)
                shims = {
                    "ours": await asyncio.to_thread(install_shim, w / "shim-ours"),
                    "theirs": Path(args.shim),
                }
                async with contextlib.AsyncExitStack() as stack:
                    peers: dict[str, PeerDaemon] = {}
                    for s in SIDES:
                        network = bridge_conflist(bridges[s], SUBNETS[s], w / s / "ipam")
                        peers[s] = await stack.enter_async_context(
                            PeerDaemon(
                                binaries[s], w / s, sim, network, node=NODE, netns_dir=rig.netns_dir
                            )
                        )
                    rt = Runtime(rig, cri, sim, w)
                    rt.ipam_dirs = [w / s / "ipam" for s in SIDES] + [w / "ipam-nads"]
                    pairings = [
                        Pairing(shim, daemon, shims[shim], peers[daemon])
                        for shim, daemon in PAIRINGS
                    ]
                    try:
                        matrix = await _scenarios(rt, pairings)
                    finally:
                        # While the daemons still answer the DELs of what a failure left.
                        leftovers = await asyncio.to_thread(rig.stop)
        finally:
            if rig.proc is not None and rig.proc.poll() is None:
                leftovers += await asyncio.to_thread(rig.stop)
            for bridge in (*bridges.values(), *NAD_BRIDGES):
                subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    written = host_writes(host_before, await asyncio.to_thread(host_snapshot))
    if leftovers or written:
        raise RuntimeError(f"left behind: {leftovers}; written on the host: {written}")
    return {
        "daemons": {s: str(p) for s, p in binaries.items()},
        "shim": args.shim,
        "runtime": "containerd 1.6 (CRI v1), runc",
        "matrix": matrix,
    }


def parse(argv: Sequence[str]) -> argparse.Namespace:
    return peer_parser("cri_interop", __doc__.split("\n")[0], "cri-interop").parse_args(list(argv))


def main(argv: Sequence[str] = ()) -> dict[str, Any]:
    if os.geteuid() != 0:
        raise SystemExit("cri_interop needs root (containerd, network and mount namespaces)")
    args = parse(argv)
    data = asyncio.run(run(args))
    publish_matrix("cri_interop", "cri-interop", args.label, data)
    return data
