"""Run any Multus-compatible thick daemon (ours, or upstream's Go binary by path) against the
API emulator, the way a DaemonSet pod would: in-cluster credentials, ``MULTUS_NODE_NAME``,
every directory of its daemon config under one work dir.

Upstream's daemon reads its Kubernetes credentials only from the fixed in-cluster files under
``/var/run/secrets/kubernetes.io/serviceaccount`` (and needs TLS), and that directory must not
be created on a development host. So the daemon runs in a mount namespace of its own
(``tests/mountns.py``, the one home of that technique, also used by the containerd rig): there
the emulator's token and CA are mounted read-only at
``/run/secrets/kubernetes.io/serviceaccount`` on a tmpfs that covers ``/run`` inside the
namespace only, with the host's ``/run`` entries bound back. Nothing is created outside the
work dir, and the mounts vanish with the daemon. Our daemon runs the same way, so both sides
pay the same TLS and in-cluster start-up.

The pods' network namespaces are pinned on files of a directory of the run's
(:func:`pods_netns_dir`; never ``ip netns add``, which creates and mounts ``/run/netns`` on a
host that has none), *after* the daemon started. That directory is made a shared mount on the
host first, and the daemon's namespace is made with propagation ``slave``: the pins reach the
daemon's view as they are made, and nothing the daemon mounts flows back to the host (it
mounts nothing there; ``shared=`` of :class:`~tests.mountns.MountNamespace` is for a program
whose mounts the host must see, as containerd's). containerd's own netns directory (the
``cri_interop`` rig) is such a shared mount already.

``python -m bench.peer --daemon PATH --workdir DIR`` runs one such daemon by hand for interop
checks (docs/development.md, "Running upstream's daemon beside ours").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from bench.common import PLUGIN_DIR, proc_mib
from cni_shim import readiness
from multusd.fsutil import atomic_write
from multusd.kubesim import KubeSim, Settings
from tests.mountns import MountNamespace, make_shared_mount

RUN = Path("/run")
SERVICEACCOUNT = RUN / "secrets" / "kubernetes.io" / "serviceaccount"
"""Where client-go's ``rest.InClusterConfig`` (and our daemon) look; ``/var/run`` is ``/run``."""
START_TIMEOUT = 60.0
"""Upstream's daemon serves only after its pod informer synced, for up to 20 s."""
STOP_TIMEOUT = 15.0
"""SIGTERM, then SIGKILL after this long."""


def ours() -> Path:
    """Our daemon's entry point in the running environment (the venv, or tox's)."""
    return Path(sys.executable).with_name("multusd")


@contextlib.contextmanager
def pods_netns_dir(path: Path) -> Iterator[Path]:
    """``path`` (a directory of the run's work dir, created if need be) bound onto itself as a
    shared mount (``tests.mountns.make_shared_mount``) for as long as the block runs: the
    directory to pin the pods' network namespaces in (``bench.common.netns``) for a
    :class:`PeerDaemon` started inside the block (``netns_dir=``), so that namespaces pinned
    after the daemon started reach its mount namespace. Exit detaches it with ``umount -l``,
    namespaces still pinned in it (a run that failed half-way) included; the host's
    ``/run/netns`` is never touched."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        make_shared_mount(path)  # inside: a bind made before a later step failed is undone too
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False, timeout=30)


def ensure_shared(netns_dir: Path) -> None:
    """``netns_dir`` must be a shared mount before the daemon's namespace is made, or the
    network namespaces pinned there later would not show up in the daemon's view."""
    if _propagation(netns_dir) != "shared":
        raise RuntimeError(
            f"{netns_dir} is not a shared mount (bench.peer.pods_netns_dir makes one); "
            "the pods' network namespaces pinned there would be invisible to the daemon"
        )


def _propagation(path: Path) -> str:
    done = subprocess.run(
        ["findmnt", "-n", "-o", "PROPAGATION", "--mountpoint", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip()


def bridge_conflist(bridge: str, subnet: str, ipam_dir: Path) -> dict[str, Any]:
    """A primary network: ``bridge`` + ``host-local`` with its ``dataDir`` under the work dir
    (never the host's ``/var/lib/cni/networks``)."""
    return {
        "cniVersion": "1.0.0", "name": "benchnet",
        "plugins": [{"type": "bridge", "bridge": bridge,
                     "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                              "ranges": [[{"subnet": subnet}]]}}],
    }  # fmt: skip


class PeerDaemon:
    """One daemon binary in its own mount namespace, configured as deployed (auto mode: it
    generates ``00-multus.conf`` from the primary network in its conf dir), every path under
    ``workdir``. ``async with`` starts it and waits until it answers ``/healthz`` and has
    written ``00-multus.conf`` in full, which is then :attr:`runtime_conf`: what a container
    runtime hands to the shim. Exit stops it. The pods' network namespaces are pinned in
    ``netns_dir``, a shared mount made before the daemon starts (:func:`pods_netns_dir`)."""

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        sim: KubeSim,
        network: dict[str, Any],
        *,
        node: str,
        netns_dir: Path,
        log_level: str = "error",
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.binary, self.workdir, self.sim, self.node = binary, workdir, sim, node
        self.network = network
        self.netns_dir = netns_dir
        """Where the pods' network namespaces are pinned (a shared mount: :func:`pods_netns_dir`,
        or containerd's netns dir)."""
        self.socket_dir = workdir / "run"
        self.conf_dir = workdir / "net.d"
        self.log_path = workdir / "daemon.log"
        self.config: dict[str, Any] = {
            "cniVersion": "1.0.0",
            "multusConfigFile": "auto",
            "multusAutoconfigDir": str(self.conf_dir),
            "cniConfigDir": str(self.conf_dir),
            "confDir": str(self.conf_dir),
            "socketDir": str(self.socket_dir),  # where the daemon listens
            "daemonSocketDir": str(self.socket_dir),  # what 00-multus.conf tells the shim
            "binDir": PLUGIN_DIR,
            "cniDir": str(workdir / "cache"),
            "logLevel": log_level,
            "logToStderr": True,
            **(extra or {}),
        }
        self.proc: asyncio.subprocess.Process | None = None
        self.runtime_conf = b""
        self._secrets_existed = SERVICEACCOUNT.parent.parent.exists()

    @property
    def socket_path(self) -> str:
        return str(self.socket_dir / "multus.sock")

    @property
    def generated_conf(self) -> Path:
        return self.conf_dir / "00-multus.conf"

    async def __aenter__(self) -> PeerDaemon:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        w = self.workdir
        serviceaccount = await self.sim.write_incluster(w / "serviceaccount")
        config_path = w / "daemon-config.json"

        def prepare() -> list[str]:
            ensure_shared(self.netns_dir)
            primary = json.dumps(self.network).encode()
            atomic_write(self.conf_dir / "10-primary.conflist", primary, mode=0o644)
            atomic_write(config_path, json.dumps(self.config, indent=2).encode(), mode=0o644)
            (w / "ns").mkdir(parents=True, exist_ok=True)
            namespace = MountNamespace(
                stage=w / "ns",
                private={SERVICEACCOUNT: serviceaccount},
                read_only=frozenset({SERVICEACCOUNT}),
            )
            # Go's flag package takes ``--config`` as well as ``-config``; so does ours.
            return namespace.argv([str(self.binary), "--config", str(config_path)])

        argv = await asyncio.to_thread(prepare)
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "MULTUS_NODE_NAME": self.node,
            **self.sim.incluster_env(),
        }
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=w,
                start_new_session=True,
            )  # fmt: skip
        try:
            await self._wait_healthy()
        except BaseException:
            await self.stop()
            raise

    async def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.proc is not None
            if self.proc.returncode is not None:
                raise RuntimeError(f"{self.binary} exited ({self.proc.returncode}): {self.tail()}")
            try:
                await asyncio.to_thread(readiness.probe, self.socket_path, readiness.HEALTHZ, 1.0)
                conf = await asyncio.to_thread(self.generated_conf.read_bytes)
                json.loads(conf)  # whole: upstream writes it in place, not by rename
                self.runtime_conf = conf
                return
            except Exception as exc:  # not up yet, whatever the reason
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.binary} not healthy: {exc}; {self.tail()}") from exc
            await asyncio.sleep(0.05)

    def tail(self, lines: int = 5) -> str:
        """The last lines of the daemon's log, for error messages."""
        with contextlib.suppress(OSError):
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    async def stop(self) -> int | None:
        """SIGTERM, SIGKILL after :data:`STOP_TIMEOUT`; then check the host has no
        ``/run/secrets`` (node safety). Returns the exit status."""
        proc, self.proc = self.proc, None
        code = None
        if proc is not None:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    code = await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    code = await proc.wait()
            else:
                code = proc.returncode
        if not self._secrets_existed and SERVICEACCOUNT.parent.parent.exists():
            raise RuntimeError(f"{SERVICEACCOUNT.parent.parent} appeared on the host")
        return code

    def rss_mib(self, field: str = "VmRSS") -> float:
        """The daemon's memory (``VmRSS`` now, ``VmHWM`` its peak), 0 once it is gone."""
        if self.proc is None:
            return 0.0
        with contextlib.suppress(OSError):
            return proc_mib(field, pid=self.proc.pid)
        return 0.0


@contextlib.asynccontextmanager
async def emulator(**settings: Any) -> AsyncIterator[KubeSim]:
    """The API emulator over TLS (in-cluster clients insist on https)."""
    async with KubeSim(Settings(**settings), tls_enabled=True) as sim:
        yield sim


async def _serve(args: argparse.Namespace) -> None:
    w = Path(args.workdir).resolve()
    w.mkdir(parents=True, exist_ok=True)
    bridge = f"mbp{os.getpid() % 100000}"
    async with emulator(bookmark_interval=60.0) as sim:
        kubeconfig = await sim.write_kubeconfig(w / "kubeconfig")
        network = bridge_conflist(bridge, args.subnet, w / "ipam")
        try:
            with pods_netns_dir(w / "netns") as netns_dir:
                async with PeerDaemon(
                    Path(args.daemon), w, sim, network, node=args.node, netns_dir=netns_dir,
                    log_level=args.log_level,
                ) as peer:  # fmt: skip
                    await _until_stopped(peer, kubeconfig, args.node)
        finally:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)


async def _until_stopped(peer: PeerDaemon, kubeconfig: Path, node: str) -> None:
    """Say where everything is, then wait for Ctrl-C (or SIGTERM)."""
    print(f"socket      {peer.socket_path}")
    print(f"conf dir    {peer.conf_dir} (runtime conf for a shim: {peer.generated_conf})")
    print(f"kubeconfig  {kubeconfig} (node {node})")
    print(f"daemon log  {peer.log_path}")
    pin = peer.netns_dir / "pod1"
    print(f"pods' netns {peer.netns_dir} (touch {pin} && unshare --net={pin} true)")
    print("Ctrl-C stops it.", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peer",
        description="Run a Multus-compatible daemon in-cluster against the API emulator.",
    )
    parser.add_argument("--daemon", default=str(ours()), help="daemon binary (default: ours)")
    parser.add_argument("--workdir", required=True, help="every file of the run goes here")
    parser.add_argument("--node", default="peer-node", help="MULTUS_NODE_NAME (pods' nodeName)")
    parser.add_argument("--subnet", default="10.252.0.0/16", help="the bridge network's subnet")
    parser.add_argument("--log-level", default="debug", help="the daemon config's logLevel")
    asyncio.run(_serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
