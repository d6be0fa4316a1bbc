"""Pods through a real container runtime: containerd 1.6 (CRI plugin, runc) runs our installed
shim from its CNI ``bin_dir`` with the daemon's generated ``00-multus.conf``, exactly as under
the kubelet; the tests speak CRI v1 to containerd and look at what is left on the node."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from tests.e2e.conftest import bridge_plugin
from tests.e2e.cri.conftest import CLUSTER_NETWORK, CLUSTER_SUBNET
from tests.e2e.cri.criapi import SANDBOX_NOTREADY, SANDBOX_READY
from tests.e2e.cri.node import NETWORKS, STATUS, Node, in_subnet
from tests.waits import eventually

NAD_API = "k8s.cni.cncf.io/v1"
SUBNET_A = "10.252.1.0/24"
SUBNET_B = "10.252.2.0/24"
NEW_CLUSTER_SUBNET = "10.252.3.0/24"


def _bridge_nad(node: Node, name: str, bridge: str, subnet: str) -> None:
    config = {"cniVersion": "1.0.0", **bridge_plugin(bridge, node.workdir, subnet=subnet)}
    config["ipam"].pop("routes")  # the default route stays on eth0
    node.kubesim.create(
        {
            "apiVersion": NAD_API,
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"config": json.dumps(config)},
        }
    )


@pytest.fixture
def nads(node: Node, extra_bridges: Callable[[str], str]) -> dict[str, str]:
    """Two bridge NADs (``net-a``, ``net-b``); their bridges are deleted after the test."""
    _bridge_nad(node, "net-a", extra_bridges("a"), SUBNET_A)
    _bridge_nad(node, "net-b", extra_bridges("b"), SUBNET_B)
    return {"net-a": SUBNET_A, "net-b": SUBNET_B}


def _ports(bridge: str) -> list[str]:
    """Interfaces enslaved to ``bridge`` in the root namespace (a pod's veth ends)."""
    out = subprocess.run(
        ["ip", "-j", "link", "show", "master", bridge], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:  # no such bridge: nothing was ever plugged into it
        return []
    return [link["ifname"] for link in json.loads(out.stdout or "[]")]


def _network_status(node: Node, pod: str) -> list[dict[str, Any]]:
    value = node.pod_annotation(pod, STATUS)
    assert value is not None, f"no {STATUS} on pod {pod}"
    return list(json.loads(value))


async def _assert_clean(node: Node, netns_before: list[str]) -> None:
    """Nothing of the test's pods is left: sandboxes, namespaces, IPs, the daemon's caches."""
    assert [s.metadata.name for s in await node.cri.list()] == []
    assert node.netns_files() == netns_before
    assert node.allocations() == {}
    assert node.delegate_caches() == []
    assert node.daemon_results() == []
    assert node.runtime_cache_files() == []  # containerd's own, gone with a successful DEL


async def test_pod_without_annotation_gets_the_cluster_network(node: Node) -> None:
    netns_before = node.netns_files()
    sandbox = await node.run_pod("plain")
    status = await node.cri.sandbox_status(sandbox)
    assert status.state == SANDBOX_READY
    assert (status.metadata.name, status.metadata.namespace) == ("plain", "default")
    assert in_subnet(status.ip, CLUSTER_SUBNET), status
    addresses = await node.addresses(sandbox)
    assert list(addresses) == ["eth0"]
    assert addresses["eth0"] == [f"{status.ip}/24"]
    [entry] = _network_status(node, "plain")
    assert (entry["name"], entry["interface"], entry["default"]) == (CLUSTER_NETWORK, "eth0", True)
    assert entry["ips"] == [status.ip]
    assert node.allocations() == {CLUSTER_NETWORK: [status.ip]}
    # What containerd gave the shim: the generated file and the kubelet's CNI_ARGS.
    cache = node.runtime_cache(sandbox)
    assert cache is not None
    assert cache["config"]["type"] == "multus-shim"
    assert cache["config"]["daemonSocketDir"] == node.daemon.socket_dir
    # (a dict: containerd builds the list from a Go map, so its order changes from run to run)
    assert dict(cache["cniArgs"]) == {
        "K8S_POD_NAMESPACE": "default",
        "K8S_POD_NAME": "plain",
        "K8S_POD_INFRA_CONTAINER_ID": sandbox,
        "K8S_POD_UID": status.metadata.uid,
        "IgnoreUnknown": "1",
    }
    await node.remove_pod(sandbox)
    await _assert_clean(node, netns_before)


async def test_pod_with_two_nads(node: Node, nads: dict[str, str]) -> None:
    netns_before = node.netns_files()
    sandbox = await node.run_pod("multi", **{NETWORKS: "net-a,net-b"})
    addresses = await node.addresses(sandbox)
    assert sorted(addresses) == ["eth0", "net1", "net2"], addresses
    assert in_subnet(addresses["eth0"][0], CLUSTER_SUBNET)
    assert in_subnet(addresses["net1"][0], SUBNET_A)
    assert in_subnet(addresses["net2"][0], SUBNET_B)
    status = await node.cri.sandbox_status(sandbox)
    assert f"{status.ip}/24" == addresses["eth0"][0]  # containerd reports eth0's address
    entries = _network_status(node, "multi")
    assert [(e["name"], e["interface"]) for e in entries] == [
        (CLUSTER_NETWORK, "eth0"),
        ("default/net-a", "net1"),
        ("default/net-b", "net2"),
    ]
    assert [e.get("default", False) for e in entries] == [True, False, False]
    assert [e["ips"][0] + "/24" for e in entries] == [
        addresses["eth0"][0],
        addresses["net1"][0],
        addresses["net2"][0],
    ]
    await node.remove_pod(sandbox)
    await _assert_clean(node, netns_before)


async def test_missing_nad_fails_the_sandbox_and_leaves_nothing(node: Node) -> None:
    netns_before = node.netns_files()
    bridge = bridge_of(node)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await node.run_pod("lost", **{NETWORKS: "missing-net"})
    details = failure.value.details() or ""
    assert "missing-net" in details, details
    assert "failed to setup network for sandbox" in details, details
    await _assert_clean(node, netns_before)
    assert _ports(bridge) == []
    assert node.pod_annotation("lost", STATUS) is None


async def test_ten_sandboxes_at_once(node: Node) -> None:
    netns_before = node.netns_files()
    names = [f"many-{i}" for i in range(10)]
    sandboxes = await asyncio.gather(*(node.run_pod(name) for name in names))
    statuses = await asyncio.gather(*(node.cri.sandbox_status(s) for s in sandboxes))
    assert [s.metadata.name for s in statuses] == names
    ips = [s.ip for s in statuses]
    assert len(set(ips)) == 10 and all(in_subnet(ip, CLUSTER_SUBNET) for ip in ips), ips
    assert node.allocations() == {CLUSTER_NETWORK: sorted(ips)}
    assert len(_ports(bridge_of(node))) == 10
    for name, ip in zip(names, ips, strict=True):
        assert _network_status(node, name)[0]["ips"] == [ip]
    await asyncio.gather(*(node.remove_pod(s) for s in sandboxes))
    await _assert_clean(node, netns_before)
    assert _ports(bridge_of(node)) == []


async def test_stop_then_remove_deletes_twice(node: Node) -> None:
    """StopPodSandbox tears the network down with the namespace's path; RemovePodSandbox
    tears it down again after containerd closed the namespace, so that DEL has an empty
    ``CNI_NETNS``. Both must succeed, or containerd could never remove the sandbox."""
    netns_before = node.netns_files()
    sandbox = await node.run_pod("stopper")
    netns = (await node.cri.sandbox_status(sandbox)).netns_path()
    assert os.path.basename(netns) in node.netns_files()
    assert node.allocations()

    await node.stop_pod(sandbox)
    status = await node.cri.sandbox_status(sandbox)
    assert status.state == SANDBOX_NOTREADY
    assert status.verbose_info()["netNamespaceClosed"] is True
    assert node.netns_files() == netns_before  # the next DEL cannot be given a namespace
    assert node.allocations() == {}  # the IP is free after the first DEL already
    first = await eventually(lambda: node.daemon_requests("DEL", sandbox), what="the first DEL")
    assert len(first) == 1 and first[0].endswith(": ok"), first

    await node.cri.remove(sandbox)
    node.running.discard(sandbox)
    dels = await eventually(
        lambda: (d := node.daemon_requests("DEL", sandbox))[1:] and d, what="the second DEL"
    )
    assert len(dels) == 2 and all(line.endswith(": ok") for line in dels), dels
    await _assert_clean(node, netns_before)


async def test_remove_after_a_daemon_restart(node: Node, nads: dict[str, str]) -> None:
    """The restarted daemon deletes from the delegate cache the first one wrote."""
    netns_before = node.netns_files()
    sandbox = await node.run_pod("survivor", **{NETWORKS: "net-a"})
    assert sorted(node.allocations()) == [CLUSTER_NETWORK, "net-a"]
    assert node.delegate_caches() == [sandbox]
    await node.restart_daemon()
    await node.remove_pod(sandbox)
    dels = [line for line in node.daemon_requests("DEL", sandbox) if line.endswith(": ok")]
    assert dels, node.daemon.log()[-2000:]
    await _assert_clean(node, netns_before)


async def test_regenerated_config_is_picked_up_without_a_restart(
    node: Node, extra_bridges: Callable[[str], str]
) -> None:
    """A changed primary: the daemon rewrites ``00-multus.conf`` and containerd's conf-dir
    watch reloads it on its own. containerd 1.6 ignores fsnotify CREATE events, so it is the
    RENAME of the daemon's temp file *in the same directory* that triggers the reload (a temp
    file moved in from another directory would only be a CREATE there, and never loaded).

    The generated file names the primary (``clusterNetwork``) rather than copying it, so a new
    subnet alone would not change it: the capability added here does."""
    netns_before = node.netns_files()
    assert node.rig.proc is not None
    containerd_pid = node.rig.proc.pid
    before = await node.run_pod("before")
    old_ip = (await node.cri.sandbox_status(before)).ip
    assert in_subnet(old_ip, CLUSTER_SUBNET)
    old_conf = await node.loaded_config()
    assert old_conf is not None and "capabilities" not in old_conf

    primary = json.loads(node.primary.read_text())
    # A new subnet on a new bridge (the bridge plugin keeps one gateway address per bridge).
    primary["plugins"][0]["bridge"] = extra_bridges("n")
    primary["plugins"][0]["ipam"]["ranges"] = [[{"subnet": NEW_CLUSTER_SUBNET}]]
    # A capability changes the generated file itself (it names the primary, not its subnet).
    primary["plugins"].append({"type": "tuning", "capabilities": {"mac": True}})
    staged = node.primary.with_name(".10-cluster.conflist.new")
    staged.write_text(json.dumps(primary))
    staged.replace(node.primary)  # as network operators write it: atomically

    await eventually(
        lambda: "capabilities" in (node.generated_config() or {}),
        what="the daemon regenerating 00-multus.conf",
    )
    loaded = await node.wait_config_loaded()
    assert loaded["capabilities"] == {"mac": True}
    assert node.rig.proc.pid == containerd_pid and node.rig.proc.poll() is None

    after = await node.run_pod("after")
    new_ip = (await node.cri.sandbox_status(after)).ip
    assert in_subnet(new_ip, NEW_CLUSTER_SUBNET), new_ip
    # containerd piped the regenerated file to the shim for the new pod, the old one before.
    cached = [node.runtime_cache(s) for s in (before, after)]
    assert [c and c["config"].get("capabilities") for c in cached] == [None, {"mac": True}]
    assert (await node.cri.sandbox_status(before)).ip == old_ip
    await node.remove_pod(before)
    await node.remove_pod(after)
    await _assert_clean(node, netns_before)


def bridge_of(node: Node) -> str:
    """The cluster network's bridge (from the primary conflist as it is now)."""
    return str(json.loads(node.primary.read_text())["plugins"][0]["bridge"])
