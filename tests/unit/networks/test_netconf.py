"""The per-request Multus ``NetConf`` (docs/upstream.md, "Per-request NetConf")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cni_shim.errors import DECODING_FAILURE, INVALID_NETWORK_CONFIG, CNIError
from multusd.networks.netconf import NetConf, load_netconf

PREFIX = "Multus: error loading netconf: LoadNetConf: "
MINIMAL: dict[str, Any] = {"clusterNetwork": "cbr0"}


def load(obj: Any) -> NetConf:
    return load_netconf(json.dumps(obj).encode())


def failure(data: bytes) -> CNIError:
    with pytest.raises(CNIError) as info:
        load_netconf(data)
    return info.value


def test_defaults() -> None:
    conf = load(MINIMAL)
    assert conf.cni_version == ""
    assert conf.name == ""
    assert conf.type == ""
    assert conf.bin_dir == "/opt/cni/bin"
    assert conf.conf_dir == "/etc/cni/multus/net.d"
    assert conf.cni_dir == "/var/lib/cni/multus"
    assert conf.kubeconfig == ""
    assert conf.cluster_network == "cbr0"
    assert conf.default_networks == []
    assert conf.delegates == []
    assert conf.multus_namespace == "kube-system"
    assert conf.system_namespaces == ["kube-system"]
    assert conf.namespace_isolation is False
    assert conf.global_namespaces == ""
    assert conf.global_namespace_list == ["default"]
    assert conf.readiness_indicator_file == ""
    assert conf.runtime_config is None
    assert conf.auxiliary_cni_chain_name == ""
    assert conf.retry_delete_on_error is False
    assert conf.prev_result is None


def test_keys_match_ignoring_case_and_unknown_ignored() -> None:
    conf = load(
        {
            "CLUSTERNETWORK": "a",
            "clusternetwork": "b",
            "BinDir": "/x",
            "ReadinessIndicatorFile": "/r",
            "runtimeconfig": {"portMappings": []},
            "chrootDir": "/ignored",
        }
    )
    assert conf.cluster_network == "b"
    assert conf.bin_dir == "/x"
    assert conf.readiness_indicator_file == "/r"
    assert conf.runtime_config == {"portMappings": []}
    assert not hasattr(conf, "chroot_dir")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("default", ["default"]),
        ("a,b", ["a", "b"]),
        (" a , b ,c ", ["a", "b", "c"]),
        ("kube-system", ["kube-system"]),
        ("a,,b", ["a", "", "b"]),
    ],
)
def test_global_namespaces(value: str, expected: list[str]) -> None:
    assert load({**MINIMAL, "globalNamespaces": value}).global_namespace_list == expected


def test_inline_delegates_without_cluster_network() -> None:
    conf = load({"delegates": [{"type": "bridge"}]})
    assert conf.delegates == [{"type": "bridge"}]


@pytest.mark.parametrize(
    "data",
    [b"{", b"[]", b'"x"', b'{"binDir": 5}', b'{"namespaceIsolation": "true"}', b"\xff"],
)
def test_decode_failure(data: bytes) -> None:
    err = failure(data)
    assert err.code == DECODING_FAILURE
    assert err.msg.startswith(PREFIX + "failed to load netconf: ")
    assert "\n" not in err.msg


def test_type_error_names_the_key() -> None:
    err = failure(b'{"clusterNetwork": "x", "systemNamespaces": "kube-system"}')
    assert err.msg.startswith(PREFIX + "failed to load netconf: systemNamespaces")


def test_prev_result_parsed() -> None:
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    conf = load({**MINIMAL, "cniVersion": "1.0.0", "prevResult": prev})
    assert conf.prev_result == prev


def test_bad_prev_result() -> None:
    obj = {**MINIMAL, "cniVersion": "1.0.0", "prevResult": {"ips": [{"address": "nope"}]}}
    err = failure(json.dumps(obj).encode())
    assert err.msg.startswith(PREFIX + "could not parse prevResult: ")
    assert err.code == DECODING_FAILURE


@pytest.mark.parametrize(
    "obj", [{}, {"delegates": []}, {"clusterNetwork": ""}, {"delegates": [], "clusterNetwork": ""}]
)
def test_needs_delegate_or_cluster_network(obj: dict[str, Any]) -> None:
    err = failure(json.dumps(obj).encode())
    assert err.code == INVALID_NETWORK_CONFIG
    assert err.msg == PREFIX + "at least one delegate/clusterNetwork must be specified"
