"""Which delegates a request gets without Kubernetes: the entry point and the cluster network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cni_shim.errors import INVALID_ENVIRONMENT, INVALID_NETWORK_CONFIG, IO_FAILURE, CNIError
from multusd.config.schema import decode
from multusd.networks.cluster_network import (
    cluster_and_default_networks,
    cluster_network,
    inline_delegates,
)
from multusd.networks.netconf import NetConf
from multusd.networks.resolve import delegates_for, hotplug_delegate


def netconf(**fields: Any) -> NetConf:
    """A NetConf from JSON keys, as the daemon decodes it."""
    return decode(NetConf, fields)


def test_inline_delegates_re_marshalled_sorted_first_is_master() -> None:
    conf = netconf(
        delegates=[
            {"type": "bridge", "name": "b", "bridge": "<x>", "cniVersion": "0.3.1"},
            {"name": "list", "plugins": [{"type": "ptp", "mtu": 1400}]},
        ]
    )
    first, second = inline_delegates(conf)
    assert (
        first.raw == b'{"bridge":"\\u003cx\\u003e","cniVersion":"0.3.1","name":"b","type":"bridge"}'
    )
    assert first.master
    assert not second.master
    assert second.is_conflist
    assert second.raw == b'{"name":"list","plugins":[{"mtu":1400,"type":"ptp"}]}'


def test_inline_delegate_error_names_its_index() -> None:
    conf = netconf(delegates=[{"type": "bridge"}, {"name": "no-type-or-plugins"}])
    with pytest.raises(CNIError) as info:
        inline_delegates(conf)
    assert info.value.code == INVALID_NETWORK_CONFIG
    assert info.value.msg == (
        "Multus: error loading netconf: LoadNetConf: failed to load delegate 1 config: "
        "LoadDelegateNetConf: failed with: LoadDelegateNetConfList: "
        "delegate must have the 'type' or 'plugin' field"
    )


def test_no_inline_delegates() -> None:
    assert inline_delegates(netconf()) == []


async def test_resolve_uses_inline_without_cluster_network() -> None:
    delegates = await cluster_and_default_networks(
        netconf(delegates=[{"type": "a"}, {"type": "b"}])
    )
    assert [d.plugin_type for d in delegates] == ["a", "b"]
    assert [d.master for d in delegates] == [True, False]


async def test_cluster_network_wins_over_inline(tmp_path: Path) -> None:
    (tmp_path / "a.conf").write_text(json.dumps({"name": "cbr0", "type": "bridge"}))
    conf = netconf(clusterNetwork="cbr0", confDir=str(tmp_path), delegates=[{"type": "x"}])
    delegates = await cluster_and_default_networks(conf)
    assert [d.name for d in delegates] == ["cbr0"]
    assert delegates[0].master


async def test_cluster_network_by_path(tmp_path: Path) -> None:
    path = tmp_path / "net.conflist"
    path.write_text(json.dumps({"name": "l", "plugins": [{"type": "bridge"}]}))
    delegate = await cluster_network(netconf(clusterNetwork=str(path)))
    assert delegate.master and delegate.is_conflist


async def test_cluster_network_not_found_message_replaced(tmp_path: Path) -> None:
    conf = netconf(clusterNetwork="missing", confDir=str(tmp_path), multusNamespace="multus")
    with pytest.raises(CNIError) as info:
        await cluster_network(conf)
    assert info.value.code == INVALID_NETWORK_CONFIG
    assert info.value.msg == (
        "GetDefaultNetworks: failed to get clusterNetwork missing in namespace multus"
    )
    assert info.value.details == "getNetDelegate: cannot find network: missing"


async def test_cluster_network_missing_path_keeps_code(tmp_path: Path) -> None:
    missing = tmp_path / "gone.conf"
    with pytest.raises(CNIError) as info:
        await cluster_network(netconf(clusterNetwork=str(missing)))
    assert info.value.code == IO_FAILURE
    assert info.value.msg == (
        f"GetDefaultNetworks: failed to get clusterNetwork {missing} in namespace kube-system"
    )
    assert str(missing) in info.value.details


async def test_add_prefixes_a_cluster_network_failure_with_the_pod(tmp_path: Path) -> None:
    conf = netconf(clusterNetwork="missing", confDir=str(tmp_path))
    with pytest.raises(CNIError) as info:
        await delegates_for("ADD", conf, None, None, pod_label="ns/p:uid")
    assert info.value.msg == (
        "Multus: [ns/p:uid]: failed to get clusterNetwork/defaultNetworks: "
        "GetDefaultNetworks: failed to get clusterNetwork missing in namespace kube-system"
    )


async def test_check_runs_only_inline_delegates(tmp_path: Path) -> None:
    (tmp_path / "a.conf").write_text(json.dumps({"name": "cbr0", "type": "bridge"}))
    with_cluster = netconf(clusterNetwork="cbr0", confDir=str(tmp_path), delegates=[{"type": "x"}])
    assert await delegates_for("CHECK", with_cluster, None, None) == []
    inline = netconf(delegates=[{"type": "a"}, {"type": "b"}])
    assert [d.plugin_type for d in await delegates_for("CHECK", inline, None, None)] == ["a", "b"]


async def test_del_without_pod_or_cluster_network_deletes_nothing(tmp_path: Path) -> None:
    conf = netconf(clusterNetwork="missing", confDir=str(tmp_path))
    assert await delegates_for("DEL", conf, None, None, container_id="c1") == []


async def test_del_without_pod_gets_the_cluster_network(tmp_path: Path) -> None:
    (tmp_path / "a.conf").write_text(json.dumps({"name": "cbr0", "type": "bridge"}))
    conf = netconf(clusterNetwork="cbr0", confDir=str(tmp_path))
    [delegate] = await delegates_for("DEL", conf, None, None, container_id="c1")
    assert delegate.name == "cbr0" and delegate.master


def test_hotplug_delegate_takes_the_request_and_its_attributes() -> None:
    config = b'{"cniVersion":"1.0.0","name":"n","type":"macvlan"}'
    delegate = hotplug_delegate(
        config, "net7", {"ips": ["10.1.1.2/24"], "mac": "02:00:00:00:00:01"}
    )
    assert delegate.raw == config
    assert (delegate.ifname_request, delegate.ip_request, delegate.mac_request) == (
        "net7",
        ("10.1.1.2/24",),
        "02:00:00:00:00:01",
    )
    assert hotplug_delegate(config, "net7", None).ip_request is None


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        ({"ips": "10.1.1.2"}, "interfaceAttributes: ips must be a list of strings"),
        ({"mac": 1}, "interfaceAttributes: mac must be a string"),
        ({"cni-args": []}, "interfaceAttributes: cni-args must be an object"),
    ],
)
def test_hotplug_attributes_are_checked(attributes: dict[str, Any], problem: str) -> None:
    with pytest.raises(CNIError) as info:
        hotplug_delegate(b'{"name":"n","type":"macvlan"}', "net1", attributes)
    assert (info.value.code, info.value.msg) == (INVALID_ENVIRONMENT, problem)
