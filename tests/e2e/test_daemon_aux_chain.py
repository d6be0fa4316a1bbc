"""The auxiliary CNI chain (``auxiliaryCNIChainName``, upstream HEAD) through the real shim and
daemon, with Debian's plugins in real namespaces and the ``passthru`` plugin as
``multusd install-shim`` installs it.

As upstream's e2e test does, the chain's ``tuning`` plugin sets a sysctl of the pod's first
interface by its name (``arp_filter``: the bridge plugin sets ``arp_notify`` itself). The chain
runs as a delegate of its own, on interface ``net<N>``, which exists nowhere: ``IFNAME`` would
name that, not ``eth0``.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from multusd import shim_bundle
from multusd.shim_install import install_passthru
from tests.e2e.conftest import bridge_plugin, pod_env, shim_config, tuning_plugin, write_json
from tests.e2e.harness import Daemon, addresses, run_shim

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]

CHAIN = "vendor-cni-chain"


async def sysctl(netns: str, iface: str, key: str) -> str:
    """``net.ipv4.conf.<iface>.<key>`` as the pod's namespace sees it."""
    proc = await asyncio.create_subprocess_exec(
        "nsenter", f"--net={netns}", "cat", f"/proc/sys/net/ipv4/conf/{iface}/{key}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, err
    return out.decode().strip()


def cached(daemon: Daemon, container_id: str) -> list[dict[str, Any]]:
    """The delegate cache's entries, each with its config bytes decoded as ``config``."""
    entries: list[dict[str, Any]] = json.loads((daemon.cni_dir / container_id).read_bytes())
    for entry in entries:
        entry["config"] = json.loads(base64.b64decode(entry["Bytes"]))
    return entries


def leftovers(daemon: Daemon, workdir: Path, container_id: str) -> list[Path]:
    """Whatever of this container the daemon or the plugins keep on disk."""
    return [p for p in workdir.rglob("*") if container_id in p.name]


def chain_conf(workdir: Path, **sysctls: str) -> dict[str, Any]:
    """A chained ``tuning`` with a data dir of its own under the test's directory."""
    return {"cniVersion": "1.0.0", "name": "sysctltwiddle",
            **tuning_plugin(workdir / "aux", sysctl=sysctls)}  # fmt: skip


@pytest.fixture
def passthru_dir(workdir: Path) -> Path:
    """``passthru`` where the daemon finds it: its own ``CNI_PATH`` (after ``binDir``)."""
    return install_passthru(workdir / "aux-bin").parent


async def test_the_chain_runs_after_the_pod_networks_and_goes_with_them(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conf_file: Path,
    workdir: Path, passthru_dir: Path,
) -> None:  # fmt: skip
    """A ``.conf`` cluster network; ``<its dir>/vendor-cni-chain/*.conf`` run as one more
    delegate, headed by ``passthru``: the sysctl is set in the pod, the chain cached and its
    result cached as ``net1``; DEL leaves nothing of the container behind."""
    write_json(conf_file.parent / CHAIN / "10-sysctl.conf",
               chain_conf(workdir, **{"net.ipv4.conf.eth0.arp_filter": "1"}))  # fmt: skip
    write_json(conf_file.parent / CHAIN / "05-ignored.json", {"type": "not-run"})
    daemon = await start_daemon(
        clusterNetwork=str(conf_file),
        auxiliaryCNIChainName=CHAIN,
        env={"CNI_PATH": str(passthru_dir)},
    )
    name = await netns()
    env = pod_env(name)
    cid = env["CNI_CONTAINERID"]
    config = shim_config(daemon)

    added = await run_shim(shim_path, "ADD", config, env=env)
    assert added.returncode == 0, (added, daemon.log())
    result = added.json()
    assert [i["name"] for i in result["interfaces"]][-1] == "eth0"  # the master's result
    assert result["ips"][0]["address"].startswith("10.251.0.")
    assert await sysctl(name, "eth0", "arp_filter") == "1"
    first, chain = cached(daemon, cid)
    assert first["Name"] == "testnet"
    assert chain["Name"] == CHAIN
    assert chain["config"]["cniVersion"] == "1.0.0"  # the Multus config's
    assert [p["type"] for p in chain["config"]["plugins"]] == ["passthru", "tuning"]
    assert (daemon.cni_dir / "results" / f"{CHAIN}-{cid}-net1").is_file()
    assert set(await addresses(name)) == {"lo", "eth0"}  # the chain made no interface

    deleted = await run_shim(shim_path, "DEL", config, env=env)
    assert (deleted.returncode, deleted.stdout) == (0, ""), deleted
    assert "eth0" not in await addresses(name)
    assert not (daemon.cni_dir / cid).exists()
    assert leftovers(daemon, workdir, cid) == []


async def test_a_conflist_cluster_network_gets_its_own_subdirectory_and_the_chain(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path,
    bridge_name: str, passthru_dir: Path,
) -> None:  # fmt: skip
    """A ``.conflist`` path is completed from the directory named after it (libcni's rule,
    upstream HEAD's loader), and the chain runs beside it."""
    net_d = workdir / "net.d"
    conflist = write_json(net_d / "10-test.conflist", {
        "cniVersion": "1.0.0", "name": "testnet", "plugins": [bridge_plugin(bridge_name, workdir)],
    })  # fmt: skip
    write_json(net_d / "testnet" / "20-tuning.conf",
               tuning_plugin(workdir, sysctl={"net.ipv4.conf.IFNAME.arp_ignore": "1"}))  # fmt: skip
    write_json(net_d / CHAIN / "10-sysctl.conf",
               chain_conf(workdir, **{"net.ipv4.conf.eth0.arp_filter": "1"}))  # fmt: skip
    daemon = await start_daemon(
        clusterNetwork=str(conflist),
        auxiliaryCNIChainName=CHAIN,
        env={"CNI_PATH": str(passthru_dir)},
    )
    name = await netns()
    env = pod_env(name)
    config = shim_config(daemon)
    added = await run_shim(shim_path, "ADD", config, env=env)
    assert added.returncode == 0, (added, daemon.log())
    assert await sysctl(name, "eth0", "arp_ignore") == "1"  # the cluster network's own
    assert await sysctl(name, "eth0", "arp_filter") == "1"  # the chain's
    first, chain = cached(daemon, env["CNI_CONTAINERID"])
    assert [p["type"] for p in first["config"]["plugins"]] == ["bridge", "tuning"]
    assert [p["type"] for p in chain["config"]["plugins"]] == ["passthru", "tuning"]
    deleted = await run_shim(shim_path, "DEL", config, env=env)
    assert deleted.returncode == 0, deleted
    assert not (daemon.cni_dir / env["CNI_CONTAINERID"]).exists()
    assert leftovers(daemon, workdir, env["CNI_CONTAINERID"]) == []


async def test_a_chain_with_no_plugins_adds_no_delegate(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conf_file: Path,
    workdir: Path, passthru_dir: Path,
) -> None:  # fmt: skip
    """No ``*.conf`` in the chain's directory: passthru alone is not run; a plugin file that
    cannot load is logged and the chain skipped, the pod's networks unharmed."""
    (conf_file.parent / CHAIN).mkdir()
    daemon = await start_daemon(
        clusterNetwork=str(conf_file),
        auxiliaryCNIChainName=CHAIN,
        env={"CNI_PATH": str(passthru_dir)},
    )
    for broken in (False, True):
        if broken:
            write_json(conf_file.parent / CHAIN / "10-broken.conf", {"name": "no type"})
        name = await netns()
        env = pod_env(name)
        added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
        assert added.returncode == 0, (added, daemon.log())
        assert await sysctl(name, "eth0", "arp_filter") == await sysctl(
            name, "default", "arp_filter"
        )
        assert [e["Name"] for e in cached(daemon, env["CNI_CONTAINERID"])] == ["testnet"]
        deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
        assert deleted.returncode == 0, deleted
    assert (
        "LoadChainedDelegatesFromBytes: error loading plugin configs: error parsing "
        "configuration: missing 'type'"
    ) in daemon.log()


async def test_a_cluster_network_that_is_not_a_path_fails_the_add(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conf_file: Path,
    workdir: Path, passthru_dir: Path,
) -> None:  # fmt: skip
    """The chain's directory is found beside ``clusterNetwork``: given by name, there is none,
    and the ADD fails before anything runs (upstream's text, our code 7)."""
    daemon = await start_daemon(
        clusterNetwork="testnet",  # found in confDir by name
        auxiliaryCNIChainName=CHAIN,
        env={"CNI_PATH": str(passthru_dir)},
    )
    name = await netns()
    env = pod_env(name)
    cid = env["CNI_CONTAINERID"]
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 1
    error = added.json()
    assert error["code"] == 7
    assert error["msg"].endswith(  # after the shim's and the server's upstream prefixes
        "ERRORED: error configuring pod [default/pod1] networking: "
        f"Multus: [default/pod1/uid-{cid}]: auxiliary chain used but ClusterNetwork must be a "
        "path, and it is not a path: testnet"
    ), error
    assert set(await addresses(name)) <= {"lo"}
    assert not (daemon.cni_dir / cid).exists()
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0, deleted
    assert leftovers(daemon, workdir, cid) == []


async def test_the_chain_with_the_bundled_passthru(
    start_daemon: StartDaemon, netns: MakeNetns, conf_file: Path, workdir: Path
) -> None:
    """What the DaemonSet installs (``install-shim --bundle``): shim and passthru on the
    private interpreter, the daemon finding passthru in that directory. The chain runs at the
    Multus config's ``cniVersion`` (0.4.0 here), whatever version the runtime's config says."""
    host_bin = workdir / "host-bin"
    shim = await asyncio.to_thread(shim_bundle.install_host_shim, host_bin)
    await asyncio.to_thread(shim_bundle.install_host_passthru, host_bin)
    write_json(conf_file.parent / CHAIN / "10-sysctl.conf",
               chain_conf(workdir, **{"net.ipv4.conf.eth0.arp_filter": "1"}))  # fmt: skip
    daemon = await start_daemon(
        cniVersion="0.4.0",
        clusterNetwork=str(conf_file),
        auxiliaryCNIChainName=CHAIN,
        env={"CNI_PATH": str(host_bin)},
    )
    name = await netns()
    env = pod_env(name)
    for version in ("0.4.0", "1.1.0"):
        added = await run_shim(shim, "ADD", shim_config(daemon, version), env=env)
        assert added.returncode == 0, (added, daemon.log())
        assert added.json()["cniVersion"] == version
        assert await sysctl(name, "eth0", "arp_filter") == "1"
        (_, chain) = cached(daemon, env["CNI_CONTAINERID"])
        assert chain["config"]["cniVersion"] == "0.4.0"
        deleted = await run_shim(shim, "DEL", shim_config(daemon, version), env=env)
        assert deleted.returncode == 0, deleted
        assert leftovers(daemon, workdir, env["CNI_CONTAINERID"]) == []


async def test_a_failing_chain_fails_the_add_and_rolls_the_pod_back(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conf_file: Path,
    workdir: Path, passthru_dir: Path,
) -> None:  # fmt: skip
    """The chain is a delegate like any: its plugins see its own interface name (``net1``,
    which ``IFNAME`` names and no link has), and its failure rolls back the pod's networks."""
    write_json(conf_file.parent / CHAIN / "10-sysctl.conf",
               chain_conf(workdir, **{"net.ipv4.conf.IFNAME.arp_filter": "1"}))  # fmt: skip
    daemon = await start_daemon(
        clusterNetwork=str(conf_file),
        auxiliaryCNIChainName=CHAIN,
        env={"CNI_PATH": str(passthru_dir)},
    )
    name = await netns()
    env = pod_env(name)
    cid = env["CNI_CONTAINERID"]
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 1, added
    msg = added.json()["msg"]
    assert (
        "ERRORED: error configuring pod [default/pod1] networking: "
        f'[default/pod1/uid-{cid}:{CHAIN}]: error adding container to network "{CHAIN}": '
    ) in msg, msg
    assert "/proc/sys/net/ipv4/conf/net1/arp_filter" in msg
    assert "eth0" not in await addresses(name)  # the cluster network rolled back
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0, deleted
    assert leftovers(daemon, workdir, cid) == []
