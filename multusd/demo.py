"""``multusd demo``: one pod sandbox wired up exactly as a container runtime would do it.

Starts a daemon with a throw-away config and socket, creates a network namespace, runs the
installed ``multus-shim`` with the CNI environment a runtime sets (ADD, CHECK, DEL), using the
real ``bridge`` and ``host-local`` plugins, shows the result and the interfaces inside the
namespace, then removes everything it created.
"""

from __future__ import annotations

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
from collections.abc import Iterator, Sequence
from pathlib import Path

EXIT_UNAVAILABLE = 2
PLUGIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
NEEDED_PLUGINS = ("bridge", "host-local")
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
def _netns(name: str) -> Iterator[str]:
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield f"/var/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@contextlib.contextmanager
def _daemon(config_path: Path, socket_path: str, log_path: Path) -> Iterator[None]:
    with log_path.open("wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "multusd", "--config", str(config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
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


def run_demo(workdir: Path, plugin_dir: str) -> None:
    from multusd.shim_install import install_shim

    tag = f"{os.getpid() % 100000}"
    bridge = f"mdemo{tag}"
    netns_name = f"multusd-demo-{tag}"
    run_dir, conf_dir = workdir / "run", workdir / "net.d"
    conf_dir.mkdir()
    cluster = conf_dir / "10-demo.conflist"
    cluster.write_text(
        json.dumps(
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
                            "dataDir": str(workdir / "ipam"),
                            "ranges": [[{"subnet": SUBNET}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                        },
                    }
                ],
            },
            indent=2,
        )
    )
    daemon_config = workdir / "daemon-config.json"
    daemon_config.write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "multusConfigFile": str(conf_dir / "00-multus.conf"),
                "socketDir": str(run_dir),
                "binDir": plugin_dir,
                "cniDir": str(workdir / "cache"),
                "clusterNetwork": str(cluster),
                "logLevel": "verbose",
                "logToStderr": True,
            },
            indent=2,
        )
    )
    shim = install_shim(workdir / "bin")
    # What the runtime reads from the CNI conf dir and pipes into the shim.
    shim_config = json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "multus-cni-network",
            "type": "multus-shim",
            "daemonSocketDir": str(run_dir),
        }
    ).encode()
    (conf_dir / "00-multus.conf").write_bytes(shim_config)

    _say(f"== multusd demo (workdir {workdir})")
    with (
        _daemon(daemon_config, str(run_dir / "multus.sock"), workdir / "daemon.log"),
        _netns(netns_name) as netns,
    ):
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_CONTAINERID": f"demo{tag}",
            "CNI_NETNS": netns,
            "CNI_IFNAME": "eth0",
            "CNI_PATH": str(workdir / "bin"),
            "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=demo-pod;"
            f"K8S_POD_INFRA_CONTAINER_ID=demo{tag};K8S_POD_UID=demo-uid-{tag}",
        }
        try:
            _say(f"-- ADD: {shim} (pod default/demo-pod, netns {netns})")
            _say(_shim(shim, "ADD", env, shim_config))
            _say(f"\n-- interfaces inside {netns_name}:")
            shown = subprocess.run(
                ["ip", "-n", netns_name, "-br", "addr"], capture_output=True, text=True, check=False
            )
            _say(shown.stdout.rstrip())
            _say("\n-- CHECK")
            _shim(shim, "CHECK", env, shim_config)
            _say("ok")
        finally:
            _say("\n-- DEL")
            _shim(shim, "DEL", env, shim_config)
            _say("ok")
            subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    _say("\n-- daemon log:")
    _say((workdir / "daemon.log").read_text().rstrip())
    _say("\n== done: namespace, bridge, IPAM state and temp files removed")


def main(argv: Sequence[str]) -> int:
    if argv:
        print("usage: multusd demo", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if os.geteuid() != 0:
        print(
            "multusd demo: needs root (it creates a network namespace and a bridge)",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    plugin_dir = find_plugin_dir()
    if plugin_dir is None or shutil.which("ip") is None:
        print(
            "multusd demo: needs the CNI plugins bridge and host-local in "
            f"{' or '.join(PLUGIN_DIRS)} and iproute2 "
            "(apt-get install containernetworking-plugins iproute2)",
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
