"""Fixtures for the tests with a real container runtime.

One containerd per module (starting it, building and importing the pause image costs about
half a second, but a module needs only one); per test a fresh API emulator, a fresh daemon in
``multusConfigFile: "auto"`` mode writing ``00-multus.conf`` into containerd's CNI
``conf_dir``, and a :class:`~tests.e2e.cri.node.Node` to drive them. The daemon is started by
the e2e ``start_daemon`` fixture, so it is stopped (and must exit 0) after each test; its
``00-multus.conf`` goes with it, and the next test's daemon writes its own, which containerd
picks up by itself.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from multusd.kubesim import KubeSim
from tests.e2e.conftest import bridge_plugin, write_json
from tests.e2e.cri.containerd import Containerd, check_installed, host_snapshot, host_writes
from tests.e2e.cri.criapi import CriClient
from tests.e2e.cri.image import build_image_tar
from tests.e2e.cri.node import NODE, Node
from tests.e2e.harness import PLUGIN_DIR, REPO, Daemon

CLUSTER_NETWORK = "cri-cluster"
CLUSTER_SUBNET = "10.252.0.0/24"


def write_cluster_conflist(directory: Path, bridge: str, workdir: Path) -> Path:
    """The node's cluster network (a bridge on ``CLUSTER_SUBNET``), as the file the daemon's
    auto mode finds in ``directory``; host-local keeps its leases under ``workdir``."""
    return write_json(
        directory / "10-cluster.conflist",
        {
            "cniVersion": "1.0.0",
            "name": CLUSTER_NETWORK,
            "plugins": [bridge_plugin(bridge, workdir, subnet=CLUSTER_SUBNET)],
        },
    )


def _install_cni_bin(bin_dir: Path) -> None:
    """containerd's one ``bin_dir``: the shim as a DaemonSet installs it, and the plugins."""
    bin_dir.mkdir(parents=True, exist_ok=True)  # install-shim refuses a missing destination
    subprocess.run(
        [sys.executable, "-m", "multusd", "install-shim", "--dest", str(bin_dir)],
        cwd=REPO, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    for plugin in Path(PLUGIN_DIR).iterdir():
        (bin_dir / plugin.name).symlink_to(plugin)


@pytest.fixture(scope="module")
def containerd() -> Iterator[Containerd]:
    """The module's containerd; after it stopped, the host's ``/var/lib/cni`` and
    ``/run/containerd`` (private in its mount namespace) must have received nothing."""
    check_installed()
    host_before = host_snapshot()
    rig = Containerd(Path(tempfile.mkdtemp(prefix="mcri-", dir="/tmp")))
    try:
        _install_cni_bin(rig.bin_dir)
        rig.start()
        rig.import_image(build_image_tar(rig.base / "pause.tar"))
    except BaseException:
        rig.stop()
        raise
    yield rig
    leftovers = rig.stop()
    assert not leftovers, f"the tests left these behind (removed now): {leftovers}"
    written = host_writes(host_before, host_snapshot())
    assert not written, f"containerd wrote on the host: {written}"


@pytest.fixture
def extra_bridges(bridge_name: str) -> Iterator[Callable[[str], str]]:
    """Factory: a unique bridge name per suffix (for NADs); every one is deleted after."""
    names: list[str] = []

    def make(suffix: str) -> str:
        name = f"{bridge_name}{suffix}"[:15]
        names.append(name)
        return name

    yield make
    for name in names:
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


@pytest_asyncio.fixture
async def node(
    containerd: Containerd,
    kubesim: KubeSim,
    start_daemon: Callable[..., Awaitable[Daemon]],
    workdir: Path,
    bridge_name: str,
) -> AsyncIterator[Node]:
    primary = write_cluster_conflist(workdir / "auto", bridge_name, workdir)
    kubeconfig = await kubesim.write_kubeconfig(workdir / "kubeconfig")
    daemon = await start_daemon(
        env={"MULTUS_NODE_NAME": NODE},
        kubeconfig=str(kubeconfig),
        multusConfigFile="auto",
        multusAutoconfigDir=str(primary.parent),
        cniConfigDir=str(containerd.conf_dir),
        daemonSocketDir=str(workdir / "run"),
    )
    async with CriClient(containerd.socket) as cri:
        node = Node(containerd, cri, kubesim, daemon, workdir, primary)
        await node.wait_config_loaded()
        try:
            yield node
        finally:
            # A failed test's sandboxes, while the daemon still answers their DELs.
            for sandbox_id in sorted(node.running):
                with contextlib.suppress(grpc.RpcError):
                    await node.remove_pod(sandbox_id)
