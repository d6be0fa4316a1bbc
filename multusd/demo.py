"""``multusd demo``: one pod sandbox wired up exactly as a container runtime would do it.

Starts the Kubernetes API emulator with the example NADs and pod (packaged as
``multusd/demo_examples/``, so the demo works from a pip install; ``manifests/examples/`` holds
the same files), a daemon connected to it, creates a network namespace and runs the installed
``multus-shim`` with the CNI environment a runtime sets (ADD, CHECK, DEL): the cluster network
on a bridge plus the pod's two extra networks (a bridge, and a macvlan with a fixed address),
with the real CNI plugins. It shows the result, the interfaces inside the namespace and the
pod's network-status annotation, then removes everything it created.

Why every path is spelled out: the demo runs on a developer's machine, not on a node, so it
must write nothing outside its temp dir. The daemon's defaults (``cniConfigDir``
``/etc/cni/net.d``, ``cniDir`` ``/var/lib/cni/multus``, ``socketDir`` ``/run/multus``) and the
plugins' (host-local's ``dataDir`` ``/var/lib/cni/networks``, tuning's ``/run/cni/tuning``) are
all node paths, so the daemon config and every network config the demo uses name a directory
of the temp dir instead; the example NADs keep the plugins' defaults, which are right on a node.
The namespace is pinned on a file of the temp dir (``unshare --net=FILE``), not made with
``ip netns add``, which would create ``/run/netns`` on a host that has none; and every host
interface the demo creates is named ``mdemo<tag>...`` (the example bridge is renamed too).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.resources
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

EXIT_UNAVAILABLE = 2
PLUGIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
NEEDED_PLUGINS = ("bridge", "host-local")
TOOLS = ("ip", "unshare", "nsenter", "umount")
SUBNET = "10.250.77.0/24"


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


EXAMPLES = "demo_examples"  # package data of multusd (pyproject.toml)
NODE = "demo-node"


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


def example(name: str) -> dict[str, Any]:
    """One of the packaged example manifests, parsed."""
    resource = importlib.resources.files("multusd").joinpath(EXAMPLES, name)
    if not resource.is_file():
        raise RuntimeError(f"{resource} is missing: the multusd package is incomplete")
    loaded: dict[str, Any] = yaml.safe_load(resource.read_text(encoding="utf-8"))
    return loaded


@dataclass(frozen=True)
class DemoDirs:
    """Where the demo keeps what the daemon, the runtime and the plugins keep on a node: all of
    it in the temp dir (see the module doc)."""

    workdir: Path

    @property
    def conf_dir(self) -> Path:  # the runtime's CNI conf dir: cniConfigDir
        return self.workdir / "net.d"

    @property
    def run(self) -> Path:  # socketDir
        return self.workdir / "run"

    @property
    def ipam(self) -> Path:  # host-local: one subdirectory per network
        return self.workdir / "ipam"

    @property
    def tuning(self) -> Path:  # tuning: the interfaces' original settings
        return self.workdir / "tuning"

    @property
    def netns(self) -> Path:  # the pod's namespace, pinned on this file
        return self.workdir / "netns"

    @property
    def kubelet(self) -> Path:  # never created: the daemon finds no devices there
        return self.workdir / "kubelet"


def daemon_config(dirs: DemoDirs, plugin_dir: str, cluster: Path) -> dict[str, Any]:
    """The daemon config: every directory and file the daemon reads or writes named explicitly
    (docs/configuration.md lists each key and its node default)."""
    workdir = dirs.workdir
    return {
        "cniVersion": "1.0.0",
        # Non-auto mode: the daemon installs this file into cniConfigDir, as on a node.
        "multusConfigFile": str(workdir / "00-multus.conf"),
        "cniConfigDir": str(dirs.conf_dir),
        "socketDir": str(dirs.run),
        "binDir": plugin_dir,
        "cniDir": str(workdir / "cache"),
        "confDir": str(workdir / "multus.d"),
        "clusterNetwork": str(cluster),
        "kubeconfig": str(workdir / "kubeconfig"),
        "kubeletPodResourcesSocket": str(dirs.kubelet / "pod-resources" / "kubelet.sock"),
        "deviceCheckpointFile": str(
            dirs.kubelet / "device-plugins" / "kubelet_internal_checkpoint"
        ),
        "logLevel": "verbose",
        "logToStderr": True,
    }


def cluster_network(dirs: DemoDirs, bridge: str) -> dict[str, Any]:
    """The cluster network: a bridge with host-local addresses from ``SUBNET``."""
    return confine(
        {
            "cniVersion": "1.0.0",
            "name": "demo-net",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": SUBNET}]],
                        "routes": [{"dst": "0.0.0.0/0", "gw": "10.250.77.1"}],
                    },
                }
            ],
        },
        dirs,
    )


def confine(config: dict[str, Any], dirs: DemoDirs) -> dict[str, Any]:
    """``config`` (a CNI config or conflist) with its plugins' state under the demo's dirs."""
    for plugin in config.get("plugins", [config]):
        ipam = plugin.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type") == "host-local":
            ipam["dataDir"] = str(dirs.ipam)
        if plugin.get("type") == "tuning":
            plugin["dataDir"] = str(dirs.tuning)
    return config


def _nad(name: str, dirs: DemoDirs, **changes: str) -> dict[str, Any]:
    """An example NAD with ``changes`` made in the plugins that have those keys, confined."""
    nad = example(name)
    config = json.loads(nad["spec"]["config"])
    unused = set(changes)
    for plugin in config.get("plugins", [config]):
        plugin.update({k: v for k, v in changes.items() if k in plugin})
        unused -= set(plugin)
    if unused:  # the example changed under the demo: say so rather than run it unchanged
        raise RuntimeError(f"{name}: no plugin has {', '.join(sorted(unused))}")
    nad["spec"]["config"] = json.dumps(confine(config, dirs))
    return nad


def _seed(server: str, dirs: DemoDirs, bridge: str, parent: str) -> str:
    """The example NADs (the bridge renamed, the macvlan on our veth) and pod (on our node);
    the pod's UID."""
    nads = "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions"
    _api(server, "POST", nads, _nad("bridge-nad.yaml", dirs, bridge=bridge))
    _api(server, "POST", nads, _nad("macvlan-nad.yaml", dirs, master=parent))
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

    _say(f"== multusd demo (workdir {workdir})")
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
    workdir = Path(tempfile.mkdtemp(prefix="mdemo-", dir="/tmp"))
    try:
        run_demo(workdir, plugin_dir)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"multusd demo failed: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0
