"""The network-selection annotations (docs/upstream.md, "Network-selection annotations"), with
upstream's cases.

Cases marked "upstream" come from ``pkg/k8sclient/k8sclient_test.go`` and
``pkg/multus/multus_cni100_test.go`` (same inputs, same outcome or error text); the others pin
Go behaviour upstream's code implies (``encoding/json``, ``net.ParseMAC``, ``strings.Split``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cni_shim import gonet
from cni_shim.errors import INVALID_NETWORK_CONFIG, CNIError
from multusd.networks.selection import (
    SelectionElement,
    parse_default_network_annotation,
    parse_network_annotation,
)

JSON_PREFIX = (
    "parsePodNetworkAnnotation: failed to parse pod Network Attachment Selection Annotation "
    "JSON format: "
)
NAME_MISMATCH = (
    "parsePodNetworkAnnotation: parsePodNetworkObjectName: Failed to parse: one or more items "
    "did not match comma-delimited format (must consist of lower case alphanumeric characters). "
    "Must start and end with an alphanumeric character), mismatch @ '{}'"
)
BAD_IFNAME = (
    "parsePodNetworkAnnotation: parsePodNetworkObjectName: Failed to parse interface name: must "
    "be less than 15 chars and not contain '/' or spaces. interface name '{}'"
)


def parse(value: str, namespace: str = "test") -> list[SelectionElement]:
    return parse_network_annotation(value, namespace)


def error_of(value: str, namespace: str = "test") -> str:
    with pytest.raises(CNIError) as info:
        parse_network_annotation(value, namespace)
    assert info.value.code == INVALID_NETWORK_CONFIG
    return info.value.msg


def el(name: str, namespace: str = "test", **fields: Any) -> SelectionElement:
    return SelectionElement(name=name, namespace=namespace, **fields)


# --------------------------------------------------------------------------------------------
# Text form


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # upstream: "gets pod network successfully from annotation values"
        ("net1", [el("net1")]),
        ("default/net1", [el("net1", "default")]),
        ("net1@my_interface", [el("net1", interface="my_interface")]),
        ("default/net1@my_interface", [el("net1", "default", interface="my_interface")]),
        # upstream: simple format annotation, and the default-network tests' "kube-system/net1"
        ("net1,net2", [el("net1"), el("net2")]),
        ("kube-system/net1", [el("net1", "kube-system")]),
        # trimming: the item, the namespace, the name and the ifname each
        (" ns / net1 @ eth1 ,\tnet2\n", [el("net1", "ns", interface="eth1"), el("net2")]),
        # empty parts are accepted here (a NAD lookup fails later)
        ("net1,", [el("net1"), el("")]),
        (",", [el(""), el("")]),
        ("/net1", [el("net1")]),
        ("ns/", [el("", "ns")]),
        ("@eth1", [el("", interface="eth1")]),
        ("net1@", [el("net1")]),
        # "null" has none of [ { " so it is a name, not JSON
        ("null", [el("null")]),
        # a 15-byte name with an underscore, dots and a tab-free unicode space inside
        ("n@a.b_c-d.e_f.gh", [el("n", interface="a.b_c-d.e_f.gh")]),
        ("n@a\u00a0b", [el("n", interface="a\u00a0b")]),
        # Go's TrimSpace knows U+3000 but not U+001C (Python's strip() knows both)
        ("\u3000net1\u3000", [el("net1")]),
    ],
)
def test_text_form(value: str, expected: list[SelectionElement]) -> None:
    assert parse(value) == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        # upstream: "fails to get podnetwork given bad annotation values"
        (
            "root@someIP/root@someOtherIP/root@thirdIP",
            "parsePodNetworkAnnotation: parsePodNetworkObjectName: Invalid network object "
            "(failed at '/')",
        ),
        (
            "root@someIP/root@someOtherIP@garbagevalue",
            "parsePodNetworkAnnotation: parsePodNetworkObjectName: Invalid network object "
            "(failed at '@')",
        ),
        ("root@someIP/root@someOtherIP", NAME_MISMATCH.format("root@someIP")),
        ("default/net1@myIfc Name", BAD_IFNAME.format("myIfc Name")),
        ("default/net1@very_long_interface_name", BAD_IFNAME.format("very_long_interface_name")),
        # the rest of the rules
        (
            "a/b/c",
            "parsePodNetworkAnnotation: parsePodNetworkObjectName: Invalid network object "
            "(failed at '/')",
        ),
        (
            "a@b@c",
            "parsePodNetworkAnnotation: parsePodNetworkObjectName: Invalid network object "
            "(failed at '@')",
        ),
        ("Net1", NAME_MISMATCH.format("Net1")),
        ("net.1", NAME_MISMATCH.format("net.1")),
        ("-net1", NAME_MISMATCH.format("-net1")),
        ("net1-", NAME_MISMATCH.format("net1-")),
        ("net_1", NAME_MISMATCH.format("net_1")),
        ("Kube-System/net1", NAME_MISMATCH.format("Kube-System")),
        ("ns/net1\x1c", NAME_MISMATCH.format("net1\x1c")),
        # the namespace is checked before the name, both before the ifname
        ("NS/Net@if name", NAME_MISMATCH.format("NS")),
        ("net1,BAD,net2", NAME_MISMATCH.format("BAD")),
        # "/" splits first, so an ifname never holds one: this is namespace "net1@a"
        ("net1@a/b", NAME_MISMATCH.format("net1@a")),
        ("net1@x\x0by", BAD_IFNAME.format("x\x0by")),
        ("net1@abcdefghijklmnop", BAD_IFNAME.format("abcdefghijklmnop")),
        # 15 characters but 16 bytes: Go counts bytes
        ("net1@abcdefghijklmn\u00e9", BAD_IFNAME.format("abcdefghijklmn\u00e9")),
        ("", 'parsePodNetworkAnnotation: pod annotation does not have "network" as key'),
    ],
)
def test_text_form_errors(value: str, error: str) -> None:
    assert error_of(value) == error


def test_text_ifname_of_exactly_15_bytes_is_accepted() -> None:
    assert parse("net1@abcdefghijklmno") == [el("net1", interface="abcdefghijklmno")]


# --------------------------------------------------------------------------------------------
# JSON form


def test_json_form_upstream_three_networks() -> None:
    # upstream: "retrieves delegates from kubernetes using JSON format annotation" (NewFakePod
    # strips newlines and tabs); ipRequest/macRequest are unknown keys and ignored
    value = (
        '[{"name":"net1"},{  "name":"net2",  "ipRequest": "1.2.3.4",  "macRequest": '
        '"aa:bb:cc:dd:ee:ff"},{  "name":"net3",  "namespace":"other-ns"}]'
    )
    assert parse(value) == [el("net1"), el("net2"), el("net3", "other-ns")]


def test_json_form_upstream_default_route() -> None:
    # upstream: "can set the default-gateway on an additional interface"
    value = (
        '[{"name":"net1"},{"name":"net2","default-route": ["192.168.2.2"]},'
        '{"name":"net3","namespace":"other-ns"}]'
    )
    assert parse(value) == [
        el("net1"),
        el("net2", default_route=("192.168.2.2",)),
        el("net3", "other-ns"),
    ]


def test_json_form_upstream_runtime_configs() -> None:
    # upstream multus_cni100_test: "executes delegates with runtimeConfigs"
    value = """[{"name":"net1",
        "mac": "c2:11:22:33:44:66",
        "ips": [ "10.0.0.1" ],
        "bandwidth": {"ingressRate": 2048, "ingressBurst": 1600,
                      "egressRate": 4096, "egressBurst": 1600},
        "portMappings": [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 8000, "containerPort": 8001, "protocol": "udp"}]
    }]"""
    (element,) = parse(value)
    assert element == el(
        "net1",
        mac="c2:11:22:33:44:66",
        ips=("10.0.0.1",),
        bandwidth={
            "ingressRate": 2048,
            "ingressBurst": 1600,
            "egressRate": 4096,
            "egressBurst": 1600,
        },
        port_mappings=(
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 8000, "containerPort": 8001, "protocol": "udp"},
        ),
    )
    # Go's field order, which is what gets re-encoded into runtimeConfig
    assert list(element.bandwidth or {}) == [
        "ingressRate",
        "ingressBurst",
        "egressRate",
        "egressBurst",
    ]


def test_json_form_every_field() -> None:
    value = json.dumps(
        [
            {
                "name": "sriov",
                "namespace": "infra",
                "interface": "net9",
                "ips": ["10.1.1.5/24", "2001:db8::5"],
                "mac": "02-00-5E-10-00-00-00-01",
                "infiniband-guid": "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01",
                "default-route": ["10.1.1.1", "2001:DB8::0001"],
                "portMappings": [{"hostPort": 1, "containerPort": 2, "hostIP": "1.2.3.4"}],
                "bandwidth": {"ingressRate": 5},
                "deviceID": "0000:03:00.1",
                "cni-args": {"z": {"y": 1, "x": [True, None, "s"]}, "a": 1.5},
            }
        ]
    )
    assert parse(value) == [
        SelectionElement(
            name="sriov",
            namespace="infra",
            interface="net9",
            ips=("10.1.1.5/24", "2001:db8::5"),
            mac="02-00-5E-10-00-00-00-01",
            infiniband_guid="00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01",
            default_route=("10.1.1.1", "2001:db8::1"),
            port_mappings=({"hostPort": 1, "containerPort": 2, "hostIP": "1.2.3.4"},),
            bandwidth={"ingressRate": 5, "ingressBurst": 0, "egressRate": 0, "egressBurst": 0},
            device_id="0000:03:00.1",
            cni_args={"a": 1.5, "z": {"x": [True, None, "s"], "y": 1}},
        )
    ]


def test_json_keys_are_case_insensitive_and_the_last_wins() -> None:
    value = (
        '[{"Name":"net1","NAMESPACE":"x","Interface":"eth9","IPS":["1.2.3.4"],"MAC":'
        '"c2:11:22:33:44:66","Default-Route":[],"portmappings":[],"BANDWIDTH":{"INGRESSRATE":7},'
        '"DEVICEID":"d","CNI-ARGS":{"K":1},"name":"net2"}]'
    )
    assert parse(value) == [
        el(
            "net2",
            "x",
            interface="eth9",
            ips=("1.2.3.4",),
            mac="c2:11:22:33:44:66",
            default_route=(),
            port_mappings=(),
            bandwidth={"ingressRate": 7, "ingressBurst": 0, "egressRate": 0, "egressBurst": 0},
            device_id="d",
            cni_args={"K": 1},
        )
    ]


def test_json_absent_null_and_empty_are_told_apart() -> None:
    absent, nulls, empty = parse(
        '[{"name":"a"},'
        '{"name":"b","ips":null,"default-route":null,"portMappings":null,"bandwidth":null,'
        '"cni-args":null},'
        '{"name":"c","ips":[],"default-route":[],"portMappings":[],"bandwidth":{},"cni-args":{}}]'
    )
    for element in (absent, nulls):
        assert element.ips is None
        assert element.default_route is None
        assert element.port_mappings is None
        assert element.bandwidth is None
        assert element.cni_args is None
    assert empty.ips == ()
    assert empty.default_route == ()
    assert empty.port_mappings == ()
    assert empty.bandwidth == {
        "ingressRate": 0,
        "ingressBurst": 0,
        "egressRate": 0,
        "egressBurst": 0,
    }
    assert empty.cni_args == {}


def test_json_go_decoding_details() -> None:
    (element,) = parse(
        '[{"name":"n","name":null,"namespace":"","interfaceRequest":"old",'
        '"bandwidth":{"ingressRate":1},"bandwidth":{"egressRate":2},'
        '"cni-args":{"a":1,"b":{"k":1}},"cni-args":{"b":{"j":2}},'
        '"default-route":["::ffff:10.0.0.1","",null],'
        '"portMappings":[{"hostPort":1},null],"unknown":{"anything":[1]}}]'
    )
    # null leaves a string alone; an empty namespace takes the default
    assert element.name == "n"
    assert element.namespace == "test"
    # the deprecated interfaceRequest is used when interface is empty
    assert element.interface == "old"
    # a repeated struct pointer is decoded into again; a repeated map merges its keys, but
    # a repeated key's value is replaced, not merged
    assert element.bandwidth == {
        "ingressRate": 1,
        "ingressBurst": 0,
        "egressRate": 2,
        "egressBurst": 0,
    }
    assert element.cni_args == {"a": 1, "b": {"j": 2}}
    # net.IP: printed as Go prints it; "" and null are nil IPs
    assert element.default_route == ("10.0.0.1", "", "")
    assert element.port_mappings == ({"hostPort": 1, "containerPort": 0}, None)


def test_json_interface_wins_over_interface_request() -> None:
    (element,) = parse('[{"name":"n","interfaceRequest":"old","interface":"new"}]')
    assert element.interface == "new"


def test_json_names_and_interfaces_are_not_validated() -> None:
    assert parse('[{"name":"Not_A.Label","namespace":"X/Y","interface":"a very long name"}]') == [
        el("Not_A.Label", "X/Y", interface="a very long name")
    ]
    assert parse('[{"namespace":"ns"}]') == [el("", "ns")]
    assert parse("[]") == []
    assert parse(" [ ] ") == []


def test_cni_args_numbers_are_go_float64() -> None:
    (element,) = parse(
        '[{"name":"n","cni-args":{"int":1,"one":1.0,"exp":1e3,"frac":0.5,"big":'
        '12345678901234567890,"huge":1e21,"neg":-2,"obj":{"b":1,"a":2,"b":3}}}]'
    )
    assert element.cni_args == {
        "big": 12345678901234567000,
        "exp": 1000,
        "frac": 0.5,
        "huge": 1e21,
        "int": 1,
        "neg": -2,
        "obj": {"a": 2, "b": 3},
        "one": 1,
    }
    assert list(element.cni_args or {}) == sorted(element.cni_args or {})
    assert list((element.cni_args or {})["obj"]) == ["a", "b"]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        # upstream: "fails when the JSON format annotation is invalid"
        ("[adsfasdfasdfasf]", JSON_PREFIX + "invalid character 'a' looking for beginning of value"),
        ("[{", JSON_PREFIX + "unexpected end of JSON input"),
        ('[{"name":"a"}] x', JSON_PREFIX + "invalid character 'x' after top-level value"),
        (
            '{"name":"net1"}',
            JSON_PREFIX + "json: cannot unmarshal object into Go value of type "
            "[]*types.NetworkSelectionElement",
        ),
        (
            '"net1"',
            JSON_PREFIX + "json: cannot unmarshal string into Go value of type "
            "[]*types.NetworkSelectionElement",
        ),
        (
            '["net1"]',
            JSON_PREFIX
            + "json: cannot unmarshal string into Go value of type types.NetworkSelectionElement",
        ),
        (
            '[{"name":1}]',
            JSON_PREFIX + "json: cannot unmarshal number into Go struct field "
            "NetworkSelectionElement.name of type string",
        ),
        (
            '[{"name":"a","ips":"1.2.3.4"}]',
            JSON_PREFIX + "json: cannot unmarshal string into Go struct field "
            "NetworkSelectionElement.ips of type []string",
        ),
        (
            '[{"ips":[1]}]',
            JSON_PREFIX + "json: cannot unmarshal number into Go struct field "
            "NetworkSelectionElement.ips of type string",
        ),
        (
            '[{"portMappings":{}}]',
            JSON_PREFIX + "json: cannot unmarshal object into Go struct field "
            "NetworkSelectionElement.portMappings of type []*types.PortMapEntry",
        ),
        (
            '[{"portMappings":[{"hostPort":"80"}]}]',
            JSON_PREFIX + "json: cannot unmarshal string into Go struct field "
            "PortMapEntry.portMappings.hostPort of type int",
        ),
        (
            '[{"portMappings":[{"containerPort":80.5}]}]',
            JSON_PREFIX + "json: cannot unmarshal number 80.5 into Go struct field "
            "PortMapEntry.portMappings.containerPort of type int",
        ),
        (
            '[{"bandwidth":[]}]',
            JSON_PREFIX + "json: cannot unmarshal array into Go struct field "
            "NetworkSelectionElement.bandwidth of type types.BandwidthEntry",
        ),
        (
            '[{"bandwidth":{"egressBurst":true}}]',
            JSON_PREFIX + "json: cannot unmarshal bool into Go struct field "
            "BandwidthEntry.bandwidth.egressBurst of type int",
        ),
        (
            '[{"cni-args":"a=b"}]',
            JSON_PREFIX + "json: cannot unmarshal string into Go struct field "
            "NetworkSelectionElement.cni-args of type map[string]interface {}",
        ),
        (
            '[{"cni-args":{"n":-1e999}}]',
            JSON_PREFIX + "json: cannot unmarshal number -1e999 into Go struct field "
            "NetworkSelectionElement.cni-args of type float64",
        ),
        (
            '[{"default-route":"10.0.0.1"}]',
            JSON_PREFIX + "json: cannot unmarshal string into Go struct field "
            "NetworkSelectionElement.default-route of type []net.IP",
        ),
        (
            '[{"default-route":[{}]}]',
            JSON_PREFIX + "json: cannot unmarshal object into Go struct field "
            "NetworkSelectionElement.default-route of type net.IP",
        ),
        ('[{"default-route":["bogus"]}]', JSON_PREFIX + "invalid IP address: bogus"),
        ('[{"default-route":["10.0.0.1/24"]}]', JSON_PREFIX + "invalid IP address: 10.0.0.1/24"),
        # the first type error is reported, decoding goes on...
        (
            '[{"name":1,"ips":2}]',
            JSON_PREFIX + "json: cannot unmarshal number into Go struct field "
            "NetworkSelectionElement.name of type string",
        ),
        # ...but a bad IP stops it and wins
        ('[{"name":1,"default-route":["x"]}]', JSON_PREFIX + "invalid IP address: x"),
        # post-decoding checks, in upstream's order and wording
        (
            '[{"name":"a","mac":"c2:11:22:33:44"}]',
            "parsePodNetworkAnnotation: failed to mac: address c2:11:22:33:44: invalid MAC address",
        ),
        (
            '[{"name":"a","infiniband-guid":"zz:zz:zz:zz:zz:zz"}]',
            "parsePodNetworkAnnotation: failed to validate infiniband GUID: "
            "address zz:zz:zz:zz:zz:zz: invalid MAC address",
        ),
        (
            '[{"name":"a","ips":["10.0.0.1/33"]}]',
            'failed to parse CIDR "10.0.0.1/33": invalid CIDR address: 10.0.0.1/33',
        ),
        ('[{"name":"a","ips":["10.0.0.256"]}]', 'failed to parse IP address "10.0.0.256"'),
        ('[{"name":"a","ips":[null]}]', 'failed to parse IP address ""'),
        ('[{"name":"a","ips":["fe80::1%eth0"]}]', 'failed to parse IP address "fe80::1%eth0"'),
        ('[{"ips":["tab\\there"]}]', 'failed to parse IP address "tab\\there"'),
        (
            '[{"mac":"zz","ips":["bad"]}]',
            "parsePodNetworkAnnotation: failed to mac: address zz: invalid MAC address",
        ),
        (
            '[{"ips":["bad"]},{"mac":"zz"}]',
            'failed to parse IP address "bad"',
        ),
        # upstream panics on a null element; refused with our own text
        ('[{"name":"a"},null]', "parsePodNetworkAnnotation: network selection element 1 is null"),
    ],
)
def test_json_form_errors(value: str, error: str) -> None:
    assert error_of(value) == error


@pytest.mark.parametrize(
    "mac",
    [
        "00:00:5e:00:53:01",
        "02:00:5e:10:00:00:00:01",
        "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01",
        "00-00-5E-00-53-01",
        "02-00-5e-10-00-00-00-01",
        "0000.5e00.5301",
        "0200.5e10.0000.0001",
        "0000.0000.fe80.0000.0000.0000.0200.5e10.0000.0001",
    ],
)
def test_mac_forms_go_accepts(mac: str) -> None:
    assert parse(json.dumps([{"name": "a", "mac": mac}]))[0].mac == mac


@pytest.mark.parametrize(
    "mac",
    [
        "00:00:5e:00:53",
        "00:00:5e:00:53:01:02",
        "00:00:5e-00:53:01",
        "00:00:5e:00:53:0g",
        "00:00:5e:00:53:1",
        "0000.5e00.530",
        "0000.5e00:5301",
        "00005e005301",
        "0000.5e00.5301.0000.0000",
        "00:00:5e:00:53:01 ",
        "\u00e9\u00e9:00:5e:00:53:01",
    ],
)
def test_mac_forms_go_refuses(mac: str) -> None:
    assert error_of(json.dumps([{"mac": mac}])) == (
        f"parsePodNetworkAnnotation: failed to mac: address {mac}: invalid MAC address"
    )


@pytest.mark.parametrize(
    ("ip", "ok"),
    [
        ("10.0.0.1/24", True),
        ("10.0.0.1/024", True),  # Go's dtoi takes leading zeros
        ("10.0.0.1/0000000032", True),
        ("2001:db8::1/128", True),
        ("::ffff:10.0.0.1/128", True),
        ("10.0.0.1/", False),
        ("10.0.0.1/+8", False),
        ("10.0.0.1/129", False),
        ("2001:db8::1/129", False),
        ("010.0.0.1/8", False),
        ("fe80::1%eth0/64", False),
        ("10.0.0.1/8/8", False),
    ],
)
def test_cidr_requests(ip: str, ok: bool) -> None:
    value = json.dumps([{"name": "a", "ips": [ip]}])
    if ok:
        assert parse(value)[0].ips == (ip,)
    else:
        assert error_of(value) == f'failed to parse CIDR "{ip}": invalid CIDR address: {ip}'


def test_lone_surrogates_become_replacement_characters() -> None:
    # As Go's decoder does with a pod annotation carrying "\ud800"
    assert error_of("net\ud800") == NAME_MISMATCH.format("net\ufffd")
    assert parse('[{"name":"\ud800"}]') == [el("\ufffd")]


# --------------------------------------------------------------------------------------------
# Default-network annotation


def test_default_network_upstream_cases() -> None:
    # upstream: getDefaultNetDelegateCRD / overwrite cluster network ("net1" in the multus
    # namespace) and the multus tests' "kube-system/net1"
    assert parse_default_network_annotation("net1", "kube-system") == el("net1", "kube-system")
    assert parse_default_network_annotation("kube-system/net1", "ms") == el("net1", "kube-system")
    assert parse_default_network_annotation("net1@eth5", "ms") == el("net1", "ms", interface="eth5")
    assert parse_default_network_annotation(
        '[{"name":"net1","interface":"eth7","default-route":[]}]', "ms"
    ) == el("net1", "ms", interface="eth7", default_route=())


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (
            "",
            "tryLoadK8sPodDefaultNetwork: failed to parse CRD object: parsePodNetworkAnnotation: "
            'pod annotation does not have "network" as key',
        ),
        (
            "net1,net2",
            "tryLoadK8sPodDefaultNetwork: more than one default network is specified: net1,net2",
        ),
        (
            "net1,",
            "tryLoadK8sPodDefaultNetwork: more than one default network is specified: net1,",
        ),
        (
            '[{"name":"a"},{"name":"b"}]',
            "tryLoadK8sPodDefaultNetwork: more than one default network is specified: "
            '[{"name":"a"},{"name":"b"}]',
        ),
        (
            "Net1",
            "tryLoadK8sPodDefaultNetwork: failed to parse CRD object: "
            + NAME_MISMATCH.format("Net1"),
        ),
        (
            "[x",
            "tryLoadK8sPodDefaultNetwork: failed to parse CRD object: "
            + JSON_PREFIX
            + "invalid character 'x' looking for beginning of value",
        ),
        (
            '[{"ips":["x"]}]',
            "tryLoadK8sPodDefaultNetwork: failed to parse CRD object: "
            'failed to parse IP address "x"',
        ),
        # upstream indexes the empty list and panics; refused with our own text
        ("[]", "tryLoadK8sPodDefaultNetwork: no default network is specified: []"),
    ],
)
def test_default_network_errors(value: str, error: str) -> None:
    with pytest.raises(CNIError) as info:
        parse_default_network_annotation(value, "kube-system")
    assert info.value.code == INVALID_NETWORK_CONFIG
    assert info.value.msg == error


# --------------------------------------------------------------------------------------------
# Properties

# Go's unicode.IsSpace is Python's str.isspace() minus U+001C..U+001F.
_GO_SPACES = "".join(
    c for c in map(chr, range(0x3001)) if c.isspace() and c not in "\x1c\x1d\x1e\x1f"
)
labels = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
ifnames = st.text(
    alphabet=st.characters(
        exclude_characters='/,@[{"' + _GO_SPACES,
        codec="utf-8",
    ),
    min_size=1,
    max_size=15,
).filter(lambda s: len(s.encode()) <= 15)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | labels, labels, st.none() | ifnames),
        min_size=1,
        max_size=5,
    ),
    labels,
)
def test_text_form_round_trips(
    items: list[tuple[str | None, str, str | None]], pod_ns: str
) -> None:
    text = ",".join(
        (f"{ns}/" if ns else "") + name + (f"@{ifname}" if ifname else "")
        for ns, name, ifname in items
    )
    assert parse(text, pod_ns) == [
        el(name, ns or pod_ns, interface=ifname or "") for ns, name, ifname in items
    ]


def _json_of(element: SelectionElement) -> dict[str, Any]:
    """The element as a user would write it (Go's json names)."""
    out: dict[str, Any] = {"name": element.name, "namespace": element.namespace}
    if element.interface:
        out["interface"] = element.interface
    if element.ips is not None:
        out["ips"] = list(element.ips)
    if element.mac:
        out["mac"] = element.mac
    if element.infiniband_guid:
        out["infiniband-guid"] = element.infiniband_guid
    if element.default_route is not None:
        out["default-route"] = list(element.default_route)
    if element.port_mappings is not None:
        out["portMappings"] = list(element.port_mappings)
    if element.bandwidth is not None:
        out["bandwidth"] = element.bandwidth
    if element.device_id:
        out["deviceID"] = element.device_id
    if element.cni_args is not None:
        out["cni-args"] = element.cni_args
    return out


def _sorted_deep(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_deep(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_deep(v) for v in value]
    return value


_ints = st.integers(min_value=-(2**31), max_value=2**31)
_strings = st.text(max_size=8)
_macs = st.lists(st.integers(0, 255), min_size=6, max_size=6).map(
    lambda octets: ":".join(f"{o:02x}" for o in octets)
)
_guids = st.lists(st.integers(0, 255), min_size=8, max_size=8).map(
    lambda octets: "-".join(f"{o:02X}" for o in octets)
)
_ipv4 = st.ip_addresses(v=4).map(str)
_ipv6 = st.ip_addresses(v=6).map(str)
_ips = st.one_of(
    _ipv4,
    _ipv6,
    st.tuples(_ipv4, st.integers(0, 32)).map(lambda t: f"{t[0]}/{t[1]}"),
    st.tuples(_ipv6, st.integers(0, 128)).map(lambda t: f"{t[0]}/{t[1]}"),
)
_port_mappings = st.builds(
    lambda host, container, protocol, host_ip: {
        "hostPort": host,
        "containerPort": container,
        **({"protocol": protocol} if protocol else {}),
        **({"hostIP": host_ip} if host_ip else {}),
    },
    _ints,
    _ints,
    _strings,
    _strings,
)
_bandwidths = st.builds(
    lambda a, b, c, d: {"ingressRate": a, "ingressBurst": b, "egressRate": c, "egressBurst": d},
    _ints,
    _ints,
    _ints,
    _ints,
)
_json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _strings
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_strings, inner, max_size=3),
    max_leaves=8,
)
elements = st.builds(
    SelectionElement,
    name=_strings,
    namespace=_strings.filter(bool),
    interface=_strings,
    ips=st.none() | st.lists(_ips, max_size=3).map(tuple),
    mac=st.just("") | _macs,
    infiniband_guid=st.just("") | _guids,
    default_route=st.none()
    | st.lists(st.one_of(_ipv4, _ipv6), max_size=2).map(
        lambda ips: tuple(gonet.canonical_ip(ip) or "" for ip in ips)
    ),
    port_mappings=st.none() | st.lists(st.none() | _port_mappings, max_size=3).map(tuple),
    bandwidth=st.none() | _bandwidths,
    device_id=_strings,
    cni_args=st.none() | st.dictionaries(_strings, _json_values, max_size=4).map(_sorted_deep),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(elements, max_size=4))
def test_json_form_round_trips(items: list[SelectionElement]) -> None:
    value = json.dumps([_json_of(item) for item in items])
    assert parse(value, "default-ns") == items


json_texts = st.recursive(
    _json_scalars | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "namespace",
                    "ips",
                    "mac",
                    "infiniband-guid",
                    "interface",
                    "portMappings",
                    "bandwidth",
                    "deviceID",
                    "cni-args",
                    "default-route",
                    "hostPort",
                    "Name",
                    "x",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=12,
).map(json.dumps)


@settings(max_examples=300, deadline=None)
@given(st.text() | json_texts | st.text(alphabet='[]{}",:/@ na1.e-', max_size=30))
def test_any_text_fails_only_with_cni_errors(value: str) -> None:
    for parser in (parse_network_annotation, parse_default_network_annotation):
        try:
            parser(value, "ns")
        except CNIError as exc:
            assert exc.code == INVALID_NETWORK_CONFIG
            assert exc.msg


# --- maxNetworksPerPod -------------------------------------------------------------------------


def test_the_networks_limit_counts_the_text_form_before_decoding() -> None:
    assert len(parse_network_annotation(",".join(["a"] * 4), "ns", limit=4)) == 4
    with pytest.raises(CNIError) as info:
        # The API server's largest annotation: one NAD named 43,690 times.
        parse_network_annotation(",".join(["ab"] * 43_690), "ns", limit=128)
    assert info.value.code == INVALID_NETWORK_CONFIG
    assert info.value.msg == (
        "parsePodNetworkAnnotation: the pod asks for 43690 networks, more than "
        "maxNetworksPerPod (128) allows"
    )


def test_the_networks_limit_counts_the_json_form_before_decoding() -> None:
    elements = json.dumps([{"name": "a"}] * 5)
    assert len(parse_network_annotation(elements, "ns", limit=5)) == 5
    with pytest.raises(CNIError, match=r"asks for 6 networks, more than maxNetworksPerPod \(5\)"):
        parse_network_annotation(json.dumps([{"name": "a"}] * 6), "ns", limit=5)
    # Counted before the elements are checked: a bad element past the limit is not reached.
    with pytest.raises(CNIError, match="asks for 3 networks"):
        parse_network_annotation('[{"name": "a"}, {"name": 1}, {}]', "ns", limit=2)
    # Not JSON the standard library reads: the Go decoder's error, as before.
    with pytest.raises(CNIError, match="JSON format"):
        parse_network_annotation('[{"name": "a"},', "ns", limit=2)
    # No limit given: as upstream, any number.
    assert len(parse_network_annotation(",".join(["a"] * 300), "ns")) == 300
