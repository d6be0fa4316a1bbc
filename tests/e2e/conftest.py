"""Fixtures for end-to-end tests. These need root, ``ip netns`` and the Debian CNI plugins;
CI runs as root with ``containernetworking-plugins`` installed, so nothing here skips: a missing
prerequisite is a failure, not a silent pass."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from multusd.kubesim import KubeSim, Settings
from multusd.shim_install import install_shim
from tests.e2e.harness import PLUGIN_DIR, Daemon, short_id
from tests.netns import netns_path, pin_netns, unpin_netns

pytestmark = pytest.mark.netns


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.netns)


@pytest.fixture(scope="session", autouse=True)
def _prerequisites() -> None:
    assert os.geteuid() == 0, "e2e tests need root (CI runs them as root)"
    assert Path(PLUGIN_DIR, "bridge").is_file(), "apt-get install containernetworking-plugins"
    assert shutil.which("ip"), "apt-get install iproute2"


@pytest.fixture(scope="session")
def shim_path() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="mshim-", dir="/tmp"))
    try:
        yield install_shim(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Short paths: unix socket paths must stay under 108 bytes.
    directory = Path(tempfile.mkdtemp(prefix="mt-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class NetnsFactory:
    """Each call creates a network namespace pinned on a file of :attr:`directory` and returns
    its path (the ``CNI_NETNS`` a runtime would pass; ``ip("-n", path, ...)`` enters it).
    Pinned files, not ``ip netns add``: that creates and mounts ``/run/netns`` on a host
    without one, which the node guard reports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.created: list[Path] = []

    async def __call__(self) -> str:
        path = self.directory / f"mt-{short_id()}"
        await asyncio.to_thread(pin_netns, path)
        self.created.append(path)
        return str(path)

    def remove_all(self) -> None:
        for path in self.created:
            unpin_netns(path)


@pytest_asyncio.fixture
async def netns() -> AsyncIterator[NetnsFactory]:
    """Factory of namespaces (:class:`NetnsFactory`); all are removed after the test."""
    factory = NetnsFactory(Path(tempfile.mkdtemp(prefix="mtns-", dir="/tmp")))
    try:
        yield factory
    finally:
        await asyncio.to_thread(factory.remove_all)
        shutil.rmtree(factory.directory, ignore_errors=True)


@pytest_asyncio.fixture
async def kubesim() -> AsyncIterator[KubeSim]:
    """The API emulator, in process, with bookmarks every second (so watches resume quickly).
    A test module that needs other settings defines its own ``kubesim``."""
    async with KubeSim(Settings(bookmark_interval=1.0)) as sim:
        yield sim


@pytest.fixture
def bridge_name() -> Iterator[str]:
    name = f"mtbr{short_id()[:6]}"
    yield name
    subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


def bridge_plugin(bridge: str, workdir: Path, subnet: str = "10.251.0.0/24") -> dict[str, Any]:
    return {
        "type": "bridge",
        "bridge": bridge,
        "ipam": {
            "type": "host-local",
            "dataDir": str(workdir / "ipam"),
            "ranges": [[{"subnet": subnet}]],
            "routes": [{"dst": "0.0.0.0/0"}],
        },
    }


def tuning_plugin(workdir: Path, **settings: Any) -> dict[str, Any]:
    """The tuning plugin with ``settings``, keeping the interfaces' original settings under
    ``workdir`` (its default ``dataDir`` is the node's ``/run/cni/tuning``)."""
    return {"type": "tuning", **settings, "dataDir": str(workdir / "tuning")}


def write_json(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


@pytest.fixture
def conflist_file(workdir: Path, bridge_name: str) -> Path:
    return write_json(
        workdir / "net.d" / "10-test.conflist",
        {
            "cniVersion": "1.0.0",
            "name": "testnet",
            "plugins": [
                bridge_plugin(bridge_name, workdir),
                tuning_plugin(workdir, sysctl={"net.ipv4.conf.IFNAME.arp_notify": "1"}),
            ],
        },
    )


@pytest.fixture
def conf_file(workdir: Path, bridge_name: str) -> Path:
    return write_json(
        workdir / "net.d" / "10-test.conf",
        {"cniVersion": "0.4.0", "name": "testnet", **bridge_plugin(bridge_name, workdir)},
    )


def daemon_config(workdir: Path, **overrides: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "multusConfigFile": str(workdir / "net.d" / "00-multus.conf"),
        "socketDir": str(workdir / "run"),
        "binDir": PLUGIN_DIR,
        "cniDir": str(workdir / "cache"),
        "confDir": str(workdir / "net.d"),
        "logLevel": "debug",
        "logToStderr": True,
        **overrides,
    }


@pytest_asyncio.fixture
async def start_daemon(workdir: Path) -> AsyncIterator[Callable[..., Awaitable[Daemon]]]:
    """Factory: start a daemon with ``daemon_config(workdir, **overrides)``; stopped after."""
    started: list[Daemon] = []

    async def start(
        env: dict[str, str] | None = None, args: tuple[str, ...] = (), **overrides: Any
    ) -> Daemon:
        daemon = Daemon(workdir, daemon_config(workdir, **overrides), env, args)
        started.append(daemon)
        await daemon.start()
        return daemon

    yield start
    for daemon in started:
        if daemon.proc is not None and daemon.proc.returncode is not None:
            continue  # ended during the test, which checked its exit code
        code = await daemon.stop()
        assert code == 0, f"daemon exited {code}: {daemon.log()}"


def shim_config(daemon: Daemon, version: str = "1.0.0") -> dict[str, Any]:
    return {
        "cniVersion": version,
        "name": "multus-cni-network",
        "type": "multus-shim",
        "daemonSocketDir": daemon.socket_dir,
    }


def pod_env(netns_name: str, container_id: str | None = None, pod: str = "pod1") -> dict[str, str]:
    cid = container_id or f"c{short_id()}"
    return {
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": netns_path(netns_name),
        "CNI_IFNAME": "eth0",
        "CNI_PATH": PLUGIN_DIR,
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};"
        f"K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=uid-{cid}",
    }
