"""``python -m bench interop --daemon PATH --shim PATH``: the drop-in promise, checked both ways.

A node being rolled runs upstream's shim against our daemon, or ours against upstream's. This
runs the same CNI scenarios through all four pairings of shim and daemon — each side with its
own shim, then the two crossings — against one API emulator, with real plugins in real network
namespaces, and shows per scenario what the container runtime would see from each pairing and
whether a crossing sees what the same shim sees with its own daemon. It takes any
Multus-compatible daemon and shim by path (``bench.peer`` runs the daemon in-cluster), so it is
the same check against any upstream release; docs/compatibility.md ("Living beside upstream")
explains the differences it shows.

What is compared is what the runtime acts on: the exit status, the CNI error code, the result's
version and shape (interfaces and address families; addresses and MACs differ by nature), the
pod's ``network-status`` (names, interfaces, default flag), and for failures the cause (the text
after upstream's ``ERRORED:`` prefix, with the request's own IDs taken out).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import REPO, ShimCall, call_shim, netns, publish, save, short_id
from bench.kube_requests import pod_env
from bench.peer import PeerDaemon, bridge_conflist, emulator, ours, pods_netns_dir
from multusd.kubesim import KubeSim
from multusd.shim_install import install_shim

NODE = "interop-node"
NAD_API = "k8s.cni.cncf.io/v1"
STATUS = "k8s.v1.cni.cncf.io/network-status"
SIDES = ("ours", "theirs")
PAIRINGS = (("theirs", "theirs"), ("theirs", "ours"), ("ours", "ours"), ("ours", "theirs"))
"""(shim, daemon). A crossing is judged against the same shim with its own daemon."""
READY_TIMEOUT = {"MULTUS_SHIM_READY_TIMEOUT": "2"}
"""Our shim's test-only bound on its readiness wait, so the daemon-down scenario is quick."""


@dataclass
class Pairing:
    """A shim and the daemon it talks to, and the runtime config that daemon generated."""

    shim: str
    daemon: str
    shim_path: Path
    peer: PeerDaemon

    @property
    def label(self) -> str:
        return f"{self.shim} shim → {self.daemon} daemon"

    def conf(self, version: str | None = None, **changes: Any) -> bytes:
        """The generated ``00-multus.conf`` as the runtime passes it, optionally changed."""
        if version is None and not changes:
            return self.peer.runtime_conf
        doc = json.loads(self.peer.runtime_conf)
        if version is not None:
            doc["cniVersion"] = version
        doc.update(changes)
        return json.dumps(doc).encode()


@dataclass
class World:
    """What every scenario may use: the emulator and a work dir of its own."""

    sim: KubeSim
    workdir: Path

    @property
    def netns_dir(self) -> Path:
        """Where the scenarios pin their pods' network namespaces (``bench.common.netns``); the
        daemons see them there when it is a shared mount (``bench.peer.pods_netns_dir``)."""
        return self.workdir / "netns"

    def pod(self, name: str, **annotations: str) -> str:
        pod = self.sim.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "annotations": annotations},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
            }
        )
        return str(pod["metadata"]["uid"])

    def network_status(self, name: str) -> list[tuple[str, str, bool]]:
        pod = self.sim.get("pods", "default", name)
        raw = (pod["metadata"].get("annotations") or {}).get(STATUS)
        if raw is None:
            return []
        return [
            (e.get("name", ""), e.get("interface", ""), bool(e.get("default")))
            for e in json.loads(raw)
        ]


def _shape(call: ShimCall) -> str:
    """What the runtime takes from a successful ADD: the version, the pod's interfaces (host-side
    ones are only counted: each daemon's primary network has a bridge of its own) and the
    address families."""
    result = json.loads(call.stdout)
    interfaces = result.get("interfaces", [])
    pod = [i.get("name", "?") for i in interfaces if i.get("sandbox")]
    host = len(interfaces) - len(pod)
    families = sorted(
        "v6" if ":" in ip.get("address", "") else "v4" for ip in result.get("ips", [])
    )
    if "ip4" in result or "ip6" in result:
        families = [f for f, k in (("v4", "ip4"), ("v6", "ip6")) if k in result]
    return (
        f"{result.get('cniVersion')} pod [{','.join(pod)}] +{host} host-side, "
        f"ips {'+'.join(families) or '-'}"
    )


def _cause(call: ShimCall, env: dict[str, str], uid: str) -> str:
    """A failure as the runtime sees it: the code and the cause, with this request's IDs out.

    The cause is what follows upstream's last ``ERRORED: ``, without the shim's own
    ``: StdinData: {...}`` suffix and without the quoting a shim that prints a daemon's body
    verbatim adds around it (``'...\n'``, or a JSON error object's ``"}'``)."""
    text = (call.stdout.strip() or call.stderr.strip()).decode(errors="replace")
    code: Any = "-"
    with contextlib.suppress(ValueError, AttributeError):
        doc = json.loads(text)
        code, text = doc.get("code", "-"), str(doc.get("msg", text))
    text = text.split(": StdinData: {", 1)[0]
    if "ERRORED: " in text:
        text = text.rsplit("ERRORED: ", 1)[-1].replace('\\"', '"')
        text = re.sub(r"\n?('|\"\}')$", "", text.rstrip()).rstrip()
    for value, placeholder in (
        (env.get("CNI_CONTAINERID", ""), "<id>"),
        (uid, "<uid>"),
        (env.get("CNI_NETNS", ""), "<netns>"),
        (env.get("K8S_POD_NAME", ""), "<pod>"),
    ):
        if value:
            text = text.replace(value, placeholder)
    text = re.sub(r"/tmp/mbi-[^ '\"]*", "<dir>", text)
    text = re.sub(r"iop-[0-9a-f]{8}", "<pod>", text)
    return f"code {code}: {text.strip()}"


def _outcome(call: ShimCall, env: dict[str, str], uid: str, *, shape: bool = False) -> str:
    if call.ok:
        return "ok " + _shape(call) if shape and call.stdout.strip() else "ok"
    return f"exit {call.returncode}, " + _cause(call, env, uid)


Scenario = Callable[[World, Pairing], Awaitable[str]]


async def _in_netns(
    world: World, body: Callable[[dict[str, str], str, str], Awaitable[str]], **annotations: str
) -> str:
    name = f"iop-{short_id()}"
    uid = world.pod(name, **annotations)
    with netns(world.netns_dir) as ns:
        return await body(pod_env(ns, name, uid), name, uid)


def add_check_del(version: str | None) -> Scenario:
    """A pod without annotations: ADD (result shape), CHECK where the version allows, DEL."""

    async def scenario(world: World, p: Pairing) -> str:
        async def body(env: dict[str, str], name: str, uid: str) -> str:
            conf = p.conf(version)
            added = await call_shim(p.shim_path, "ADD", conf, env)
            parts = ["ADD " + _outcome(added, env, uid, shape=True)]
            if version is None or version >= "0.4.0":
                checked = await call_shim(p.shim_path, "CHECK", conf, env)
                parts.append("CHECK " + _outcome(checked, env, uid))
            deleted = await call_shim(p.shim_path, "DEL", conf, env)
            parts.append("DEL " + _outcome(deleted, env, uid))
            return "; ".join(parts)

        return await _in_netns(world, body)

    return scenario


async def two_nads(world: World, p: Pairing) -> str:
    """A pod asking for two NADs: result shape and the network-status written."""

    async def body(env: dict[str, str], name: str, uid: str) -> str:
        added = await call_shim(p.shim_path, "ADD", p.conf(), env)
        status = world.network_status(name) if added.ok else []
        deleted = await call_shim(p.shim_path, "DEL", p.conf(), env)
        listed = ",".join(f"{n}:{i}{'*' if d else ''}" for n, i, d in status) or "-"
        added_text = _outcome(added, env, uid, shape=True)
        return f"ADD {added_text}; status {listed}; DEL {_outcome(deleted, env, uid)}"

    return await _in_netns(world, body, **{"k8s.v1.cni.cncf.io/networks": "iop-a,iop-b@extra"})


async def missing_nad(world: World, p: Pairing) -> str:
    """A pod asking for a NAD that does not exist: the error the runtime shows; DEL still ok."""

    async def body(env: dict[str, str], name: str, uid: str) -> str:
        added = await call_shim(p.shim_path, "ADD", p.conf(), env)
        deleted = await call_shim(p.shim_path, "DEL", p.conf(), env)
        return f"ADD {_outcome(added, env, uid)}; DEL {_outcome(deleted, env, uid)}"

    return await _in_netns(world, body, **{"k8s.v1.cni.cncf.io/networks": "iop-missing"})


async def del_twice(world: World, p: Pairing) -> str:
    """DEL twice (containerd: Stop, then Remove with an empty CNI_NETNS), then DEL of a
    container never added."""

    async def body(env: dict[str, str], name: str, uid: str) -> str:
        added = await call_shim(p.shim_path, "ADD", p.conf(), env)
        first = await call_shim(p.shim_path, "DEL", p.conf(), env)
        second = await call_shim(p.shim_path, "DEL", p.conf(), {**env, "CNI_NETNS": ""})
        unknown_env = {**env, "CNI_CONTAINERID": f"never{short_id()}"}
        unknown = await call_shim(p.shim_path, "DEL", p.conf(), unknown_env)
        return (
            f"ADD {_outcome(added, env, uid)}; DEL {_outcome(first, env, uid)}; "
            f"DEL again {_outcome(second, env, uid)}; DEL unknown {_outcome(unknown, env, uid)}"
        )

    return await _in_netns(world, body)


async def daemon_down(world: World, p: Pairing) -> str:
    """No daemon on the socket the config names: ADD fails (naming the socket), DEL is ok."""
    empty = world.workdir / f"nosock-{short_id()}"
    empty.mkdir()

    async def body(env: dict[str, str], name: str, uid: str) -> str:
        conf = p.conf(daemonSocketDir=str(empty))
        env = {**env, **READY_TIMEOUT}
        added = await call_shim(p.shim_path, "ADD", conf, env)
        deleted = await call_shim(p.shim_path, "DEL", conf, env)
        return f"ADD {_outcome(added, env, uid)}; DEL {_outcome(deleted, env, uid)}".replace(
            str(empty), "<sock dir>"
        )

    return await _in_netns(world, body)


SCENARIOS: dict[str, Scenario] = {
    "ADD/CHECK/DEL, generated config (1.0.0)": add_check_del(None),
    "ADD/DEL, config at 0.3.1": add_check_del("0.3.1"),
    "ADD/CHECK/DEL, config at 1.1.0": add_check_del("1.1.0"),
    "two NADs": two_nads,
    "missing NAD": missing_nad,
    "DEL twice, DEL unknown": del_twice,
    "daemon not running": daemon_down,
}


NADS = (("iop-a", "mbia", "10.247.1.0/24"), ("iop-b", "mbib", "10.247.2.0/24"))
"""The two bridge NADs the scenarios ask for: (name, bridge, subnet)."""
NAD_BRIDGES = tuple(bridge for _, bridge, _ in NADS)


def create_nads(world: World) -> None:
    """:data:`NADS` in the emulator, their IPAM under the scenario's work dir."""
    for name, bridge, subnet in NADS:
        config = {
            "cniVersion": "0.3.1",
            "name": name,
            "type": "bridge",
            "bridge": bridge,
            "ipam": {
                "type": "host-local",
                "subnet": subnet,
                "dataDir": str(world.workdir / "ipam-nads"),
            },
        }
        world.sim.create(
            {
                "apiVersion": NAD_API,
                "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"config": json.dumps(config)},
            }
        )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    binaries = {"ours": Path(args.ours_daemon), "theirs": Path(args.daemon)}
    bridges = {s: f"mbi{s[0]}{short_id()[:6]}" for s in SIDES}
    matrix: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="mbi-", dir="/tmp") as tmp:
        w = Path(tmp)
        try:
            async with emulator(bookmark_interval=5.0) as sim:
                world = World(sim, w)
                create_nads(world)
                shims = {
                    "ours": await asyncio.to_thread(install_shim, w / "bin"),
                    "theirs": Path(args.shim),
                }
                async with contextlib.AsyncExitStack() as stack:
                    stack.enter_context(pods_netns_dir(world.netns_dir))
                    peers = {}
                    for s in SIDES:
                        network = bridge_conflist(
                            bridges[s], f"10.24{8 if s == 'ours' else 6}.0.0/16", w / s / "ipam"
                        )
                        peers[s] = await stack.enter_async_context(
                            PeerDaemon(
                                binaries[s],
                                w / s,
                                sim,
                                network,
                                node=NODE,
                                netns_dir=world.netns_dir,
                                log_level="error",
                            )
                        )
                    for title, scenario in SCENARIOS.items():
                        row = matrix.setdefault(title, {})
                        for shim, daemon in PAIRINGS:
                            pairing = Pairing(shim, daemon, shims[shim], peers[daemon])
                            row[pairing.label] = await scenario(world, pairing)
        finally:
            for bridge in (*bridges.values(), *NAD_BRIDGES):
                subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    return {
        "daemons": {s: str(p) for s, p in binaries.items()},
        "shim": args.shim,
        "matrix": matrix,
    }


def summarize(data: dict[str, Any], command: str) -> str:
    """One table a scenario: each pairing's outcome, and whether a crossing matches the same
    shim with its own daemon."""
    lines = [f"Command: `{command}`", ""]
    for title, row in data["matrix"].items():
        lines += [
            f"**{title}**",
            "",
            "| pairing | what the runtime sees | same as that shim with its own daemon |",
            "|---|---|---|",
        ]
        labels = list(row)
        for label in labels:
            shim = label.split(" shim", 1)[0]
            own = row[f"{shim} shim → {shim} daemon"]
            same = (
                "—"
                if label.endswith(f"{shim} daemon")
                else ("yes" if row[label] == own else "**no**")
            )
            lines.append(f"| {label} | {row[label].replace('|', '/')} | {same} |")
        lines.append("")
    return "\n".join(lines)


def peer_parser(bench: str, description: str, section: str) -> argparse.ArgumentParser:
    """The command line every interop matrix takes: the other side's daemon and shim, ours,
    and the label of the published section ``bench:<section>-LABEL``."""
    parser = argparse.ArgumentParser(prog=f"python -m bench {bench}", description=description)
    parser.add_argument("--daemon", required=True, help="the other side's daemon binary")
    parser.add_argument("--shim", required=True, help="the other side's shim binary")
    parser.add_argument(
        "--ours-daemon", default=str(ours()), help="our daemon (default: this venv's)"
    )
    parser.add_argument(
        "--label",
        default="upstream",
        help=f"names the published section (docs/compatibility.md, bench:{section}-LABEL)",
    )
    return parser


def publish_matrix(
    bench: str, section: str, label: str, data: dict[str, Any], about: str = ""
) -> None:
    """Save the run's data, put its matrix in docs/compatibility.md (section
    ``<section>-<label>``, with the command that made it) and print it."""
    command = (
        f"python -m bench {bench} --daemon <their multus-daemon> --shim <their multus-shim> "
        f"--label {label}"
    )
    text = summarize(data, command)
    if about:
        text = about + "\n\n" + text
    save(f"{section}-{label}", data)
    publish(f"{section}-{label}", text, REPO / "docs" / "compatibility.md")
    print(text)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = peer_parser("interop", __doc__.split("\n")[0], "interop")
    parser.add_argument(
        "--about", default="", help="a sentence on where the other side's binaries come from"
    )
    return parser.parse_args(list(argv))


def main(argv: Sequence[str] = ()) -> dict[str, Any]:
    if os.geteuid() != 0:
        raise SystemExit("interop needs root (network namespaces, mount namespaces)")
    args = parse(argv)
    data = asyncio.run(run(args))
    publish_matrix("interop", "interop", args.label, data, args.about)
    return data
