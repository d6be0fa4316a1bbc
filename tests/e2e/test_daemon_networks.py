"""Multus semantics end to end: NADs and the pod's annotations, through the real shim and
daemon, against the API emulator, with real plugins (bridge, macvlan on a veth parent,
host-local, static, tuning) in real namespaces."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from multusd.kubesim import KubeSim
from multusd.kubesim.resources import EVENTS
from tests.e2e.conftest import bridge_plugin, shim_config, tuning_plugin
from tests.e2e.harness import Daemon, addresses, ip, run_shim, short_id
from tests.e2e.kube import NETWORK_STATUS, create_pod, start_kube, uid_env
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
NETWORKS = "k8s.v1.cni.cncf.io/networks"
NAD_API = "k8s.cni.cncf.io/v1"


@pytest_asyncio.fixture
async def kubesim() -> AsyncIterator[KubeSim]:
    async with KubeSim() as sim:
        yield sim


@pytest_asyncio.fixture
async def parent() -> AsyncIterator[str]:
    """A veth in the root namespace to hang macvlans off (this kernel has no dummy links)."""
    name = f"mtp{short_id()[:6]}"
    await ip("link", "add", name, "type", "veth", "peer", "name", f"{name}x")
    await ip("link", "set", name, "up")
    await ip("link", "set", f"{name}x", "up")
    yield name
    await ip("link", "del", name, check=False)


def _nad(name: str, config: dict[str, Any] | None, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": NAD_API,
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"config": json.dumps(config)} if config is not None else {},
    }


@pytest_asyncio.fixture
async def nets(kubesim: KubeSim, workdir: Path, parent: str, bridge_name: str) -> dict[str, str]:
    """NADs: a bridge (with tuning for MACs) and a macvlan with static IPs."""
    second_bridge = f"{bridge_name}b"[:15]
    bridge = {
        "cniVersion": "1.0.0",
        "plugins": [
            bridge_plugin(second_bridge, workdir, subnet="10.251.20.0/24"),
            tuning_plugin(workdir, capabilities={"mac": True}),
        ],
    }
    macvlan = {
        "cniVersion": "1.0.0",
        "type": "macvlan",
        "master": parent,
        "mode": "bridge",
        "capabilities": {"ips": True, "mac": True},
        "ipam": {"type": "static"},
    }
    kubesim.create(_nad("bridge-net", bridge))
    kubesim.create(_nad("macvlan-net", macvlan))
    kubesim.create(_nad("broken-net", {"cniVersion": "1.0.0", "type": "no-such-plugin"}))
    kubesim.create(_nad("bridge-net", bridge, namespace="kube-system"))
    yield {"bridge": second_bridge}
    await ip("link", "del", second_bridge, check=False)


def _status(kubesim: KubeSim, pod: str, namespace: str = "default") -> list[dict[str, Any]]:
    obj = kubesim.get("pods", namespace, pod)
    return list(json.loads(obj["metadata"]["annotations"][NETWORK_STATUS]))


async def test_text_annotation_with_interface_names(
    start_daemon: StartDaemon, kubesim: KubeSim, nets: dict[str, str], netns: MakeNetns,
    shim_path: Path, workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    uid = create_pod(kubesim, "web", **{NETWORKS: "bridge-net@blue, default/bridge-net"})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "web", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    addrs = await addresses(name)
    assert set(addrs) == {"lo", "eth0", "blue", "net2"}
    assert addrs["blue"][0].startswith("10.251.20.")
    statuses = _status(kubesim, "web")
    assert [(s["name"], s["interface"]) for s in statuses] == [
        ("testnet", "eth0"), ("default/bridge-net", "blue"), ("default/bridge-net", "net2"),
    ]  # fmt: skip
    assert statuses[0]["default"] is True and "default" not in statuses[1]
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0
    assert set(await addresses(name)) == {"lo"}


async def test_json_annotation_ips_mac_and_default_route(
    start_daemon: StartDaemon, kubesim: KubeSim, nets: dict[str, str], netns: MakeNetns,
    shim_path: Path, workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    selection = [
        {
            "name": "macvlan-net",
            "interface": "mv1",
            "ips": ["10.251.30.7/24"],
            "mac": "0a:58:0a:fb:1e:07",
            "default-route": ["10.251.30.1"],
        }
    ]
    uid = create_pod(kubesim, "db", **{NETWORKS: json.dumps(selection)})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "db", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    assert "10.251.30.7/24" in (await addresses(name))["mv1"]
    link = json.loads(await ip("-n", name, "-j", "link", "show", "mv1"))[0]
    assert link["address"] == "0a:58:0a:fb:1e:07"
    routes = json.loads(await ip("-n", name, "-j", "route", "show", "default"))
    assert [(r["gateway"], r["dev"]) for r in routes] == [("10.251.30.1", "mv1")]
    macvlan = _status(kubesim, "db")[1]
    assert macvlan["name"] == "default/macvlan-net"
    assert macvlan["ips"] == ["10.251.30.7"] and macvlan["mac"] == "0a:58:0a:fb:1e:07"
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
    assert set(await addresses(name)) == {"lo"}


async def test_default_network_annotation_replaces_the_cluster_network(
    start_daemon: StartDaemon, kubesim: KubeSim, nets: dict[str, str], netns: MakeNetns,
    shim_path: Path, workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    uid = create_pod(kubesim, "alt", **{"v1.multus-cni.io/default-network": "bridge-net"})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "alt", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    assert (await addresses(name))["eth0"][0].startswith("10.251.20.")
    (status,) = _status(kubesim, "alt")
    assert (status["name"], status["default"]) == ("kube-system/bridge-net", True)
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (
            "nope",
            "cannot find a network-attachment-definition (nope) in namespace (default): "
            'networkattachmentdefinition.k8s.cni.cncf.io "nope" not found',
        ),
        ("a/b/c", "parsePodNetworkObjectName: Invalid network object (failed at '/')"),
        ("other/bridge-net", "namespace isolation enabled, annotation violates permission"),
    ],
)
async def test_annotation_errors(
    annotation: str, message: str,
    start_daemon: StartDaemon, kubesim: KubeSim, nets: dict[str, str], netns: MakeNetns,
    shim_path: Path, workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    uid = create_pod(kubesim, "bad", **{NETWORKS: annotation})
    daemon = await start_kube(
        start_daemon, kubesim, workdir, conflist_file, namespaceIsolation=True
    )
    name = await netns()
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=uid_env(name, "bad", uid))
    assert added.returncode == 1
    error = added.json()
    assert "error loading k8s delegates k8s args" in error["msg"]
    assert message in error["msg"]
    assert set(await addresses(name)) == {"lo"}


async def test_missing_nad_records_a_warning_event(
    start_daemon: StartDaemon, kubesim: KubeSim, nets: dict[str, str], netns: MakeNetns,
    shim_path: Path, workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    uid = create_pod(kubesim, "lost", **{NETWORKS: "nope"})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    assert (
        await run_shim(shim_path, "ADD", shim_config(daemon), env=uid_env(name, "lost", uid))
    ).returncode == 1

    def events() -> list[dict[str, Any]]:
        return [entry.decode() for entry in kubesim.store.iter_entries(EVENTS, "default")]

    # Posted in the background, after the ADD's answer.
    (event,) = await eventually(events, what="the NoNetworkFound event")
    assert (event["type"], event["reason"]) == ("Warning", "NoNetworkFound")
    assert "cannot find a network-attachment-definition (nope)" in event["message"]
    assert event["involvedObject"]["name"] == "lost"


async def test_failing_second_network_rolls_back_the_first(
    start_daemon: StartDaemon, kubesim: KubeSim, nets: dict[str, str], netns: MakeNetns,
    shim_path: Path, workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    uid = create_pod(kubesim, "half", **{NETWORKS: "bridge-net,broken-net"})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "half", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 1
    assert 'error adding container to network "broken-net"' in added.json()["msg"]
    assert set(await addresses(name)) == {"lo"}
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0


async def test_del_after_the_pod_is_gone_and_after_a_restart(
    start_daemon: StartDaemon, kubesim: KubeSim, nets: dict[str, str], netns: MakeNetns,
    shim_path: Path, workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    uid = create_pod(kubesim, "gone", **{NETWORKS: "bridge-net"})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "gone", uid)
    assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    kubesim.delete("pods", "default", "gone")
    assert await daemon.stop() == 0
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
    assert set(await addresses(name)) == {"lo"}


async def test_del_without_a_cache_rebuilds_from_the_pod(
    start_daemon: StartDaemon, kubesim: KubeSim, nets: dict[str, str], netns: MakeNetns,
    shim_path: Path, workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    uid = create_pod(kubesim, "nocache", **{NETWORKS: "bridge-net"})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "nocache", uid)
    assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    (daemon.cni_dir / env["CNI_CONTAINERID"]).unlink()  # an older daemon's node, say
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
    assert set(await addresses(name)) == {"lo"}


async def test_resource_name_nad_gets_its_device(
    start_daemon: StartDaemon, kubesim: KubeSim, netns: MakeNetns, shim_path: Path,
    workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    """A NAD with ``resourceName``: the pod's device (from the device-plugin checkpoint here;
    the kubelet socket is absent) reaches the plugin as ``deviceID``/``pciBusID``."""
    bin_dir = workdir / "recbin"
    bin_dir.mkdir()
    record = workdir / "stdin.json"
    plugin = bin_dir / "recorder"
    plugin.write_text(
        "#!/usr/bin/python3 -IS\nimport sys, json\n"
        f"open({str(record)!r}, 'w').write(sys.stdin.read())\n"
        "print(json.dumps({'cniVersion': '1.0.0'}))\n"
    )
    plugin.chmod(0o755)
    nad = _nad("sriov-net", {"cniVersion": "1.0.0", "type": "recorder"})
    nad["metadata"]["annotations"] = {"k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"}
    kubesim.create(nad)
    uid = create_pod(kubesim, "dev", **{NETWORKS: "sriov-net"})
    checkpoint = workdir / "kubelet_internal_checkpoint"
    checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": [{
        "PodUID": uid, "ContainerName": "c", "ResourceName": "intel.com/sriov",
        "DeviceIDs": {"0": ["0000:03:00.2", "0000:03:00.1"]},
    }]}}))  # fmt: skip
    for real in ("bridge", "host-local", "tuning"):  # the cluster network's plugins
        (bin_dir / real).symlink_to(f"/usr/lib/cni/{real}")
    daemon = await start_kube(
        start_daemon, kubesim, workdir, conflist_file,
        binDir=str(bin_dir), kubeletPodResourcesSocket=str(workdir / "absent.sock"),
        deviceCheckpointFile=str(checkpoint),
    )  # fmt: skip
    name = await netns()
    env = uid_env(name, "dev", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    stdin = json.loads(record.read_text())
    assert stdin["deviceID"] == stdin["pciBusID"] == "0000:03:00.1"  # the first, sorted
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
