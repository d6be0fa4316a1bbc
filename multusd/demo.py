"""``multusd demo``: one pod sandbox wired up exactly as a container runtime would do it.

Starts the Kubernetes API emulator with the example NADs and pod (packaged as
``multusd/demo_examples/``, so the demo works from a pip install; ``manifests/examples/`` holds
the same files), a daemon connected to it, creates a network namespace and runs the installed
``multus-shim`` with the CNI environment a runtime sets (ADD, CHECK, DEL): the cluster network
on a bridge plus the pod's two extra networks (a bridge, and a macvlan with a fixed address),
with the real CNI plugins. It shows the result, the interfaces inside the namespace and the
pod's network-status annotation, then removes everything it created.

Where it writes, and why every path is spelled out: its rig, ``multusd/demo_rig.py``.
The whole demo runs in a network namespace of its own standing in for the node
(:func:`in_node_namespace`), so its bridges and the forwarding sysctl the cluster network's
``isGateway`` turns on are that namespace's, never the machine's. The pod's namespace is pinned
on a file of the temp dir (``unshare --net=FILE``), not made with ``ip netns add``, which would
create ``/run/netns`` on a host that has none; every interface the demo creates is named
``mdemo<tag>...`` (the example bridge is renamed too).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from multusd.demo_rig import NODE, DemoDirs, cluster_network, daemon_config, example, nad

EXIT_UNAVAILABLE = 2
PLUGIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
NEEDED_PLUGINS = ("bridge", "host-local")
TOOLS = ("ip", "unshare", "nsenter", "umount")
NODE_ENV = "MULTUSD_DEMO_NODE"
"""Set (to the demo's temp dir) for the demo's child in its node namespace."""


def find_plugin_dir() -> str | None:
    for directory in PLUGIN_DIRS:
        if all(Path(directory, p).is_file() for p in NEEDED_PLUGINS):
            return directory
    return None


def _say(text: str = "") -> None:
    print(text, flush=True)


def _wait_for_socket(path: str, daemon: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError(f"the daemon exited early with code {daemon.returncode}")
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
            probe.connect(path)
            return
        time.sleep(0.05)
    raise RuntimeError(f"the daemon did not listen on {path} within {timeout:.0f}s")


@contextlib.contextmanager
def _netns(path: Path) -> Iterator[str]:
    """A new network namespace, kept alive by a bind mount on ``path`` (see the module doc)."""
    path.touch()
    subprocess.run(["unshare", f"--net={path}", "true"], check=True)
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", str(path)], check=False)


@contextlib.contextmanager
def _daemon(config_path: Path, socket_path: str, log_path: Path) -> Iterator[None]:
    with log_path.open("wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "multusd", "--config", str(config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MULTUS_NODE_NAME": NODE},
        )
    try:
        _wait_for_socket(socket_path, daemon)
        yield
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def _shim(shim: Path, command: str, env: dict[str, str], config: bytes) -> str:
    full = {**env, "CNI_COMMAND": command}
    done = subprocess.run([str(shim)], input=config, env=full, capture_output=True, check=False)
    out = done.stdout.decode()
    if done.returncode != 0:
        raise RuntimeError(f"multus-shim {command} failed (exit {done.returncode}): {out}")
    return out


@contextlib.contextmanager
def _kubesim(workdir: Path) -> Iterator[str]:
    """The API emulator as a subprocess; yields its base URL (plain http on loopback)."""
    kubeconfig = workdir / "kubeconfig"
    with (workdir / "kubesim.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "multusd", "kubesim", "serve", "--port", "0",
             "--kubeconfig-out", str(kubeconfig)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not kubeconfig.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the API emulator did not start")
            time.sleep(0.05)
        config = yaml.safe_load(kubeconfig.read_text())
        yield str(config["clusters"][0]["cluster"]["server"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _api(server: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        server + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _seed(server: str, dirs: DemoDirs, bridge: str, parent: str) -> str:
    """The example NADs (the bridge renamed, the macvlan on our veth) and pod (on our node);
    the pod's UID."""
    nads = "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions"
    _api(server, "POST", nads, nad("bridge-nad.yaml", dirs, bridge=bridge))
    _api(server, "POST", nads, nad("macvlan-nad.yaml", dirs, master=parent))
    pod = example("pod.yaml")
    pod["spec"]["nodeName"] = NODE
    created = _api(server, "POST", "/api/v1/namespaces/default/pods", pod)
    return str(created["metadata"]["uid"])


def run_demo(workdir: Path, plugin_dir: str) -> None:
    from multusd.shim_install import install_shim

    dirs = DemoDirs(workdir)
    tag = f"{os.getpid() % 100000}"
    # Every host interface the demo creates: the two bridges and the macvlan's parent veth.
    bridge, pod_bridge, parent = f"mdemo{tag}", f"mdemo{tag}b", f"mdemo{tag}p"
    dirs.conf_dir.mkdir()
    cluster = dirs.conf_dir / "10-demo.conflist"
    cluster.write_text(json.dumps(cluster_network(dirs, bridge), indent=2))
    shim = install_shim(workdir / "bin")
    (workdir / "00-multus.conf").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "multus-cni-network",
                "type": "multus-shim",
                "daemonSocketDir": str(dirs.run),
            }
        )
    )
    daemon_file = workdir / "daemon-config.json"
    daemon_file.write_text(json.dumps(daemon_config(dirs, plugin_dir, cluster), indent=2))

    _say(f"== multusd demo (workdir {workdir}; a network namespace of its own is the node)")
    subprocess.run(["ip", "link", "add", parent, "type", "veth", "peer", "name", f"{parent}x"],
                   check=True)  # fmt: skip
    try:
        subprocess.run(["ip", "link", "set", parent, "up"], check=True)
        with _kubesim(workdir) as server:
            uid = _seed(server, dirs, pod_bridge, parent)
            _say(f"-- API emulator at {server}: NADs bridge-conf and macvlan-conf, pod "
                 f"default/multus-example on {NODE}")  # fmt: skip
            with (
                _daemon(daemon_file, str(dirs.run / "multus.sock"), workdir / "daemon.log"),
                _netns(dirs.netns) as netns,
            ):
                # What the runtime reads from its CNI conf dir (the daemon put it there) and
                # pipes into the shim.
                shim_config = (dirs.conf_dir / "00-multus.conf").read_bytes()
                cni_path = f"{shim.parent}:{plugin_dir}"
                _sandbox(_Pod(shim, shim_config, netns, cni_path, tag, uid, server))
    finally:
        for link in (bridge, pod_bridge, parent):
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)
    _say("\n-- daemon log:")
    _say((workdir / "daemon.log").read_text().rstrip())
    _say("\n== done: namespace, links, IPAM state, emulator and temp files removed")


@dataclass(frozen=True)
class _Pod:
    """One demo pod sandbox and where its pieces are."""

    shim: Path
    shim_config: bytes
    netns: str
    cni_path: str
    tag: str
    uid: str
    server: str


def _sandbox(pod: _Pod) -> None:
    """ADD, show, CHECK and DEL one pod sandbox, exactly as a container runtime would."""
    shim, shim_config, netns = pod.shim, pod.shim_config, pod.netns
    tag, uid, server = pod.tag, pod.uid, pod.server
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_CONTAINERID": f"demo{tag}",
        "CNI_NETNS": netns,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": pod.cni_path,
        "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=multus-example;"
        f"K8S_POD_INFRA_CONTAINER_ID=demo{tag};K8S_POD_UID={uid}",
    }
    try:
        _say(f"-- ADD: {shim} (pod default/multus-example, netns {netns})")
        _say(_shim(shim, "ADD", env, shim_config))
        _say(f"\n-- interfaces inside {netns}:")
        shown = subprocess.run(
            ["nsenter", f"--net={netns}", "ip", "-br", "addr"],
            capture_output=True,
            text=True,
            check=False,
        )
        _say(shown.stdout.rstrip())
        stored = _api(server, "GET", "/api/v1/namespaces/default/pods/multus-example")
        _say("\n-- k8s.v1.cni.cncf.io/network-status on the pod:")
        _say(stored["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"])
        _say("\n-- CHECK")
        _shim(shim, "CHECK", env, shim_config)
        _say("ok")
    finally:
        _say("\n-- DEL")
        _shim(shim, "DEL", env, shim_config)
        _say("ok")


def main(argv: Sequence[str]) -> int:
    """``multusd demo``: no options, but ``--help`` says what it does and needs (argparse exits
    2 on anything else, the same code as a machine that cannot run it)."""
    argparse.ArgumentParser(
        prog="multusd demo",
        description="Wire up one pod sandbox on this machine exactly as a container runtime "
        "would: the Kubernetes API emulator holding the example NADs and pod, a daemon "
        "connected to it, a network namespace, and the installed multus-shim running ADD, "
        "CHECK and DEL with the real CNI plugins (the cluster network plus a bridge and a "
        "macvlan). It shows the result, the interfaces and the pod's network-status "
        "annotation, then removes everything; all it writes stays in a temp dir. Needs root, "
        "the bridge and host-local plugins, iproute2 and util-linux.",
    ).parse_args(argv)
    if os.geteuid() != 0:
        print(
            "multusd demo: needs root (it creates a network namespace and a bridge)",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    plugin_dir = find_plugin_dir()
    if plugin_dir is None or not all(shutil.which(tool) for tool in TOOLS):
        print(
            "multusd demo: needs the CNI plugins bridge and host-local in "
            f"{' or '.join(PLUGIN_DIRS)}, iproute2 and util-linux "
            "(apt-get install containernetworking-plugins iproute2 util-linux)",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    inside = os.environ.get(NODE_ENV)
    if inside:  # the child below, in the demo's node namespace
        try:
            run_demo(Path(inside), plugin_dir)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"multusd demo failed: {exc}", file=sys.stderr)
            return 1
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="mdemo-", dir="/tmp"))
    try:
        return in_node_namespace(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def in_node_namespace(workdir: Path) -> int:
    """Run the demo in a network namespace of its own that stands in for the node.

    Why: the cluster network's bridge has ``isGateway``, and the bridge plugin then turns on
    ``net.ipv4.ip_forward`` (and ``conf.all.forwarding``) of the namespace it runs in; the
    bridges, the macvlan's parent and the pod's host-side veths are links of that namespace
    too. In a namespace of the demo's own (``unshare --net``: it dies with the demo's last
    process, crash or not), none of that touches the machine's. The emulator, the daemon and
    the shim run in it as well (the API on its loopback); the files stay in ``workdir``.
    """
    script = 'ip link set lo up && exec "$@"'
    argv = ["unshare", "--net", "sh", "-c", script, "sh", sys.executable, "-m", "multusd", "demo"]
    return subprocess.run(argv, env={**os.environ, NODE_ENV: str(workdir)}, check=False).returncode
