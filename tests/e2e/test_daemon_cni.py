"""ADD, CHECK and DEL through the real shim and daemon, with real plugins in real namespaces."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cni_shim import wire
from multusd import shim_bundle
from tests.e2e.conftest import bridge_plugin, pod_env, shim_config
from tests.e2e.harness import Daemon, addresses, ip, run_shim

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]

VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


async def _add_check_del(
    shim: Path, daemon: Daemon, netns_name: str, version: str = "1.0.0"
) -> dict[str, Any]:
    env = pod_env(netns_name)
    config = shim_config(daemon, version)
    added = await run_shim(shim, "ADD", config, env=env)
    assert added.returncode == 0, added
    result = added.json()
    addrs = await addresses(netns_name)
    assert "eth0" in addrs and any(a.startswith("10.251.0.") for a in addrs["eth0"])
    checked = await run_shim(shim, "CHECK", config, env=env)
    assert (checked.returncode, checked.stdout) == (0, ""), checked
    deleted = await run_shim(shim, "DEL", config, env=env)
    assert (deleted.returncode, deleted.stdout) == (0, ""), deleted
    assert "eth0" not in await addresses(netns_name)
    assert not (daemon.cni_dir / env["CNI_CONTAINERID"]).exists()
    return dict(result)


async def test_conflist_cluster_network(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    result = await _add_check_del(shim_path, daemon, await netns())
    assert result["cniVersion"] == "1.0.0"
    assert [i["name"] for i in result["interfaces"]][-1] == "eth0"
    assert result["ips"][0]["address"].startswith("10.251.0.")


async def test_uvloop_event_loop_serves_add_check_del(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    """``--loop uvloop`` (benchmarked, not the default): plugins spawned and reaped by uvloop."""
    daemon = await start_daemon(clusterNetwork=str(conflist_file), args=("--loop", "uvloop"))
    result = await _add_check_del(shim_path, daemon, await netns())
    assert result["ips"][0]["address"].startswith("10.251.0.")
    assert "uvloop" in daemon.log()


async def test_conf_cluster_network(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conf_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conf_file))
    await _add_check_del(shim_path, daemon, await netns())


async def test_cluster_network_by_name_and_directory(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    by_name = await start_daemon(clusterNetwork="testnet")
    await _add_check_del(shim_path, by_name, await netns())
    await by_name.stop()
    by_dir = await start_daemon(clusterNetwork=str(conflist_file.parent))
    await _add_check_del(shim_path, by_dir, await netns())


async def test_inline_delegates(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    delegate = {"cniVersion": "0.4.0", "name": "inline", **bridge_plugin(bridge_name, workdir)}
    daemon = await start_daemon(delegates=[delegate])
    await _add_check_del(shim_path, daemon, await netns())


@pytest.mark.parametrize("version", VERSIONS)
async def test_result_printed_in_shim_config_version(
    version: str,
    start_daemon: StartDaemon,
    netns: MakeNetns,
    shim_path: Path,
    conflist_file: Path,
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    name = await netns()
    env = pod_env(name)
    config = shim_config(daemon, version)
    added = await run_shim(shim_path, "ADD", config, env=env)
    assert added.returncode == 0, added
    assert not added.stdout.endswith("\n")
    assert added.stdout.startswith("{\n    ")
    result = added.json()
    assert result["cniVersion"] == version
    if version in ("0.1.0", "0.2.0"):
        assert result["ip4"]["ip"].startswith("10.251.0.")
    else:
        assert result["ips"][0]["address"].startswith("10.251.0.")
    deleted = await run_shim(shim_path, "DEL", config, env=env)
    assert deleted.returncode == 0


@pytest.mark.parametrize(
    ("version", "answered"), [("0.3.1", "1.0.0"), ("1.0.0", "1.0.0"), ("1.1.0", "1.1.0")]
)
async def test_upstream_shim_request_gets_a_result_it_can_decode(
    version: str,
    answered: str,
    start_daemon: StartDaemon,
    netns: MakeNetns,
    conflist_file: Path,
) -> None:
    """A request exactly as upstream's shim sends it (no print header): ``{"Result":...}`` at
    1.0.0, which shims on libcni 1.0/1.1 decode, unless the config says 1.1.0."""
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    env = {**pod_env(await netns()), "CNI_COMMAND": "ADD", "CNI_PATH": "/usr/lib/cni"}
    config = json.dumps(shim_config(daemon, version)).encode()
    status, raw = await daemon.request("POST", "/cni", wire.encode_request(env, config))
    assert status == 200, raw
    result = json.loads(raw)["Result"]
    assert result["cniVersion"] == answered
    assert result["ips"][0]["address"].startswith("10.251.0.")
    status, raw = await daemon.request(
        "POST", "/cni", wire.encode_request({**env, "CNI_COMMAND": "DEL"}, config)
    )
    assert (status, raw) == (200, b"")


async def test_del_twice_and_del_unknown_container(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    name = await netns()
    env = pod_env(name)
    config = shim_config(daemon)
    assert (await run_shim(shim_path, "ADD", config, env=env)).returncode == 0
    for _ in range(2):
        deleted = await run_shim(shim_path, "DEL", config, env=env)
        assert (deleted.returncode, deleted.stdout) == (0, "")
    never_added = await run_shim(shim_path, "DEL", config, env=pod_env(name, "neveradded"))
    assert never_added.returncode == 0


async def test_concurrent_adds_for_different_containers(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    config = shim_config(daemon)
    names = [await netns() for _ in range(6)]
    envs = [pod_env(n, pod=f"pod{i}") for i, n in enumerate(names)]
    added = await asyncio.gather(*(run_shim(shim_path, "ADD", config, env=e) for e in envs))
    assert all(a.returncode == 0 for a in added), added
    ips = {a.json()["ips"][0]["address"] for a in added}
    assert len(ips) == len(envs)
    deleted = await asyncio.gather(*(run_shim(shim_path, "DEL", config, env=e) for e in envs))
    assert all(d.returncode == 0 for d in deleted)
    for name in names:
        assert "eth0" not in await addresses(name)


async def test_add_failing_in_second_delegate_leaves_nothing(
    start_daemon: StartDaemon,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    bridge_name: str,
) -> None:
    good = {"cniVersion": "1.0.0", "name": "good", **bridge_plugin(bridge_name, workdir)}
    bad = {"cniVersion": "1.0.0", "name": "bad", "type": "does-not-exist"}
    daemon = await start_daemon(delegates=[good, bad])
    name = await netns()
    env = pod_env(name)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 1
    error = added.json()
    assert 'error adding container to network "bad"' in error["msg"]
    assert 'failed to find plugin "does-not-exist"' in str(error)
    # The first delegate was rolled back: no interface, and its IP went back to the pool.
    assert "eth0" not in await addresses(name)
    ipam_dir = workdir / "ipam" / "good"
    leftover = [p.name for p in ipam_dir.iterdir()] if ipam_dir.exists() else []
    assert not [n for n in leftover if n.startswith("10.")], leftover
    # The runtime's DEL then consumes the delegate cache.
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
    assert not (daemon.cni_dir / env["CNI_CONTAINERID"]).exists()


async def test_missing_netns_is_a_clear_error(
    start_daemon: StartDaemon, shim_path: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    env = pod_env("does-not-exist")
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 1
    assert "no net namespace /var/run/netns/does-not-exist found" in added.json()["msg"]


async def test_bridge_state_cleaned(
    start_daemon: StartDaemon,
    netns: MakeNetns,
    shim_path: Path,
    conflist_file: Path,
    bridge_name: str,
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    await _add_check_del(shim_path, daemon, await netns())
    links = json.loads(await ip("-j", "link", "show", "master", bridge_name))
    assert links == []


async def test_the_host_shim_for_python_less_nodes_against_the_real_daemon(
    start_daemon: StartDaemon, netns: MakeNetns, conflist_file: Path, workdir: Path
) -> None:
    """The shim the DaemonSet's init container installs (``install-shim --bundle``: its own
    interpreter and a zip of what it imports, no host Python used) through a whole ADD, CHECK
    and DEL with the real daemon and plugins, at the CNI versions that have CHECK.
    (tests/image runs the same bundle under containerd against the daemon in its container.)"""
    shim = await asyncio.to_thread(shim_bundle.install_host_shim, workdir / "host-bin")
    assert shim.read_bytes().startswith(f"#!{workdir / 'host-bin' / 'multus-shim.d'}".encode())
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    for version in ("0.4.0", "1.0.0", "1.1.0"):  # CHECK exists since 0.4.0
        result = await _add_check_del(shim, daemon, await netns(), version)
        assert result["cniVersion"] == version
