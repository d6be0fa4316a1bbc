"""Per-delegate runtime conf: interface names, ``CNI_ARGS`` and capability args
(docs/upstream.md, "Delegate runtime config and CNI_ARGS")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from cni_shim.errors import INVALID_NETWORK_CONFIG, CNIError
from multusd.cni.args import K8sArgs
from multusd.commands.runtime_conf import capability_args, interface_name, runtime_args
from multusd.networks.delegates import Delegate, delegate_from_bytes

K8S = K8sArgs(pod_name="pod", pod_namespace="ns", infra_container_id="sb", pod_uid="uid")
BASE = (
    ("IgnoreUnknown", "true"),
    ("K8S_POD_NAMESPACE", "ns"),
    ("K8S_POD_NAME", "pod"),
    ("K8S_POD_INFRA_CONTAINER_ID", "sb"),
    ("K8S_POD_UID", "uid"),
)


def delegate(**fields: Any) -> Delegate:
    return replace(delegate_from_bytes(b'{"type":"bridge","name":"n"}'), **fields)


# --- interface names ------------------------------------------------------------------------


def test_master_gets_runtime_ifname() -> None:
    assert interface_name(delegate(master=True), 0, "eth0") == "eth0"


def test_others_numbered_by_position() -> None:
    assert interface_name(delegate(), 1, "eth0") == "net1"
    assert interface_name(delegate(), 3, "eth0") == "net3"


def test_request_wins_even_for_master() -> None:
    assert interface_name(delegate(ifname_request="foo"), 2, "eth0") == "foo"
    assert interface_name(delegate(master=True, ifname_request="bar"), 0, "eth0") == "bar"


def test_named_requests_do_not_shift_numbering() -> None:
    chain = [delegate(master=True), delegate(), delegate(ifname_request="foo"), delegate()]
    names = [interface_name(d, i, "eth0") for i, d in enumerate(chain)]
    assert names == ["eth0", "net1", "foo", "net3"]


# --- runtime args ---------------------------------------------------------------------------


def test_runtime_args_fixed_order_with_empty_values() -> None:
    assert runtime_args(K8S, delegate()) == BASE
    empty = runtime_args(K8sArgs(pod_name="p", pod_namespace="n"), delegate())
    assert empty == (
        ("IgnoreUnknown", "true"),
        ("K8S_POD_NAMESPACE", "n"),
        ("K8S_POD_NAME", "p"),
        ("K8S_POD_INFRA_CONTAINER_ID", ""),
        ("K8S_POD_UID", ""),
    )


def test_env_args_fill_empty_values_first() -> None:
    k8s = K8sArgs(pod_name="p", pod_namespace="n")
    args = runtime_args(k8s, delegate(), env_args="K8S_POD_UID=u1;K8S_POD_NAME=other")
    assert args == (
        ("IgnoreUnknown", "true"),
        ("K8S_POD_NAMESPACE", "n"),
        ("K8S_POD_NAME", "p"),
        ("K8S_POD_INFRA_CONTAINER_ID", ""),
        ("K8S_POD_UID", "u1"),
        ("K8S_POD_NAME", "other"),
    )


def test_env_args_split_at_first_equals_and_skip_bad_items() -> None:
    args = runtime_args(K8S, delegate(), env_args="BLAHBLAH=foo=bar;junk;;EMPTY=")
    assert args == (*BASE, ("BLAHBLAH", "foo=bar"), ("EMPTY", ""))


def test_env_empty_value_does_not_fill() -> None:
    k8s = K8sArgs(pod_name="p", pod_namespace="n")
    args = runtime_args(k8s, delegate(), env_args="K8S_POD_UID=")
    assert args[4] == ("K8S_POD_UID", "")
    assert args[5:] == (("K8S_POD_UID", ""),)


def test_legacy_args_appended_only_when_asked() -> None:
    requested = delegate(mac_request="c2:11:22:33:44:66", ip_request=("10.1.1.5/24", "fd00::5"))
    assert runtime_args(K8S, requested) == BASE
    assert runtime_args(K8S, requested, legacy=True) == (
        *BASE,
        ("MAC", "c2:11:22:33:44:66"),
        ("IP", "10.1.1.5/24,fd00::5"),
    )
    assert runtime_args(K8S, delegate(), legacy=True) == BASE


def test_legacy_args_after_env_args() -> None:
    args = runtime_args(K8S, delegate(ip_request=("1.2.3.4",)), env_args="X=1", legacy=True)
    assert args[-2:] == (("X", "1"), ("IP", "1.2.3.4"))


@pytest.mark.parametrize(
    "mac",
    [
        "C2-11-22-33-44-66",
        "c211.2233.4466",
        "02:00:5e:10:00:00:00:01",
        "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01",
    ],
)
def test_go_mac_forms_accepted(mac: str) -> None:
    args = runtime_args(K8S, delegate(mac_request=mac), legacy=True)
    assert args[-1] == ("MAC", mac)


@pytest.mark.parametrize(
    "mac",
    [
        "c2:11:22:33:44",
        "zz:11:22:33:44:55",
        "c2:11-22:33:44:66",
        "c2:11:22:33:44:66\n",
        "c2:11:22:33:44:66:77",
        "c211.2233",
    ],
)
def test_bad_mac(mac: str) -> None:
    with pytest.raises(CNIError) as info:
        runtime_args(K8S, delegate(mac_request=mac), legacy=True)
    assert info.value.code == INVALID_NETWORK_CONFIG
    assert info.value.msg == f'DelegateAdd: failed to parse mac address "{mac}"'


@pytest.mark.parametrize(
    "ip", ["10.0.0.300", "10.0.0.1/33", "10.0.0.1/255.255.255.0", "fe80::1%eth0", "10.0.0.1/"]
)
def test_bad_ip(ip: str) -> None:
    with pytest.raises(CNIError) as info:
        runtime_args(K8S, delegate(ip_request=("10.0.0.1/24", ip)), legacy=True)
    assert info.value.code == INVALID_NETWORK_CONFIG
    assert info.value.msg == f'DelegateAdd: failed to parse IP address "{ip}"'


# --- capability args ------------------------------------------------------------------------

RUNTIME: dict[str, Any] = {
    "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
    "bandwidth": {"ingressRate": 1},
    "ips": ["10.0.0.9/24"],
    "mac": "aa:aa:aa:aa:aa:aa",
    "io.kubernetes.cri.pod-annotations": {"a": "b"},
    "dns": {"servers": ["1.1.1.1"]},
    "cgroupPath": "/x",
}
SELECTION: dict[str, Any] = {
    "port_mappings_request": ({"hostPort": 1, "containerPort": 2},),
    "bandwidth_request": {"egressRate": 2},
    "ip_request": ("192.168.1.2/24",),
    "mac_request": "c2:11:22:33:44:66",
    "infiniband_guid_request": "guid",
    "device_id": "0000:00:01.0",
}


def test_master_gets_runtime_values_only_modelled_keys() -> None:
    master = delegate(master=True, **SELECTION)
    assert capability_args(master, RUNTIME) == {
        "portMappings": RUNTIME["portMappings"],
        "bandwidth": RUNTIME["bandwidth"],
        "ips": RUNTIME["ips"],
        "mac": RUNTIME["mac"],
    }


def test_secondary_gets_selection_overrides() -> None:
    assert capability_args(delegate(**SELECTION), RUNTIME) == {
        "portMappings": [{"hostPort": 1, "containerPort": 2}],
        "bandwidth": {"egressRate": 2},
        "ips": ["192.168.1.2/24"],
        "mac": "c2:11:22:33:44:66",
        "infinibandGUID": "guid",
        "deviceID": "0000:00:01.0",
    }


def test_secondary_inherits_runtime_values_not_overridden() -> None:
    assert capability_args(delegate(), RUNTIME) == capability_args(delegate(master=True), RUNTIME)


def test_empty_values_dropped() -> None:
    runtime = {
        "portMappings": [],
        "bandwidth": {},
        "ips": [],
        "mac": "",
        "infinibandGUID": "",
        "deviceID": "",
        "CNIDeviceInfoFile": "/devinfo",
    }
    assert capability_args(delegate(), runtime) == {"CNIDeviceInfoFile": "/devinfo"}
    assert capability_args(delegate(), None) == {}
    assert capability_args(delegate(master=True), {}) == {}


def test_runtime_config_not_mutated() -> None:
    runtime = dict(RUNTIME)
    capability_args(delegate(**SELECTION), runtime)
    assert runtime == RUNTIME


def test_an_empty_selection_list_replaces_the_runtimes_value() -> None:
    """``"ips": []`` in a selection drops the runtime's IPs; no ``ips`` key keeps them
    (upstream compares the request with nil, then emits only non-empty lists)."""
    runtime = {"ips": ["10.0.0.9/24"], "portMappings": [{"hostPort": 80}]}
    base = delegate_from_bytes(b'{"type":"macvlan","name":"m"}')
    assert capability_args(base, runtime) == runtime
    emptied = replace(base, ip_request=(), port_mappings_request=())
    assert capability_args(emptied, runtime) == {}
