"""cni_shim.results against libcni v1.3.0 (pkg/types/{020,040,100}, create, convert, version).

Expected JSON is written out literally, derived by hand from the Go structs (field order,
omitempty, the 1.x map re-marshal) and from upstream's own fixtures.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cni_shim import results
from cni_shim.errors import CNIError

# --------------------------------------------------------------------------------------------
# A bridge + host-local style result (bridge interface, sandbox interface, v4 + v6, routes with
# 1.1 extras, DNS) in each layout. "@V@" stands for the version.

DNS_STRUCT = (
    '{"nameservers":["10.96.0.10"],"domain":"cluster.local",'
    '"search":["default.svc.cluster.local","svc.cluster.local"],"options":["ndots:5"]}'
)
DNS_SORTED = (
    '{"domain":"cluster.local","nameservers":["10.96.0.10"],'
    '"options":["ndots:5"],"search":["default.svc.cluster.local","svc.cluster.local"]}'
)

WIRE_1X = (
    '{"cniVersion":"@V@","dns":' + DNS_SORTED + ","
    '"interfaces":[{"mac":"0a:58:0a:f4:01:01","name":"cni0"},'
    '{"mac":"aa:bb:cc:dd:ee:ff","mtu":1450,"name":"eth0","pciID":"0000:00:01.0",'
    '"sandbox":"/var/run/netns/cni-1","socketPath":"/run/vhost.sock"}],'
    '"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1","interface":1},'
    '{"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1","interface":1}],'
    '"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"},'
    '{"dst":"::/0","gw":"fd00:10:244:1::1","mtu":1400,"priority":10,"scope":0,"table":100},'
    '{"dst":"10.96.0.0/12","gw":"10.244.1.1"}]}'
)
ROUTES_STRUCT = (
    '"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"},'
    '{"dst":"::/0","gw":"fd00:10:244:1::1","mtu":1400,"priority":10,"table":100,"scope":0},'
    '{"dst":"10.96.0.0/12","gw":"10.244.1.1"}]'
)
WIRE_04X = (
    '{"cniVersion":"@V@",'
    '"interfaces":[{"name":"cni0","mac":"0a:58:0a:f4:01:01"},'
    '{"name":"eth0","mac":"aa:bb:cc:dd:ee:ff","sandbox":"/var/run/netns/cni-1"}],'
    '"ips":[{"version":"4","interface":1,"address":"10.244.1.5/24","gateway":"10.244.1.1"},'
    '{"version":"6","interface":1,"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}],'
    + ROUTES_STRUCT
    + ',"dns":'
    + DNS_STRUCT
    + "}"
)
# Down to 0.2.0: first IP per family, routes split by dst family with only dst and gw.
WIRE_02X = (
    '{"cniVersion":"@V@",'
    '"ip4":{"ip":"10.244.1.5/24","gateway":"10.244.1.1","routes":['
    '{"dst":"0.0.0.0/0","gw":"10.244.1.1"},{"dst":"10.96.0.0/12","gw":"10.244.1.1"}]},'
    '"ip6":{"ip":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1","routes":['
    '{"dst":"::/0","gw":"fd00:10:244:1::1"}]},'
    '"dns":' + DNS_STRUCT + "}"
)
# 0.x → 1.x: interfaces only ever had name, mac and sandbox.
WIRE_04X_UP = (
    '{"cniVersion":"@V@","dns":' + DNS_SORTED + ","
    '"interfaces":[{"mac":"0a:58:0a:f4:01:01","name":"cni0"},'
    '{"mac":"aa:bb:cc:dd:ee:ff","name":"eth0","sandbox":"/var/run/netns/cni-1"}],'
    '"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1","interface":1},'
    '{"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1","interface":1}],'
    '"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"},'
    '{"dst":"::/0","gw":"fd00:10:244:1::1","mtu":1400,"priority":10,"scope":0,"table":100},'
    '{"dst":"10.96.0.0/12","gw":"10.244.1.1"}]}'
)
# 0.2.0 → 0.4.0: ip4 then ip6, versions by slot, no interfaces or indexes, routes ip4's first.
WIRE_02X_TO_04X = (
    '{"cniVersion":"@V@",'
    '"ips":[{"version":"4","address":"10.244.1.5/24","gateway":"10.244.1.1"},'
    '{"version":"6","address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}],'
    '"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"},{"dst":"10.96.0.0/12","gw":"10.244.1.1"},'
    '{"dst":"::/0","gw":"fd00:10:244:1::1"}],'
    '"dns":' + DNS_STRUCT + "}"
)
WIRE_02X_TO_1X = (
    '{"cniVersion":"@V@","dns":' + DNS_SORTED + ","
    '"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"},'
    '{"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}],'
    '"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"},{"dst":"10.96.0.0/12","gw":"10.244.1.1"},'
    '{"dst":"::/0","gw":"fd00:10:244:1::1"}]}'
)

FAMILY = {
    v: ("020" if v < "0.3" else "040" if v < "1" else "100") for v in results.SUPPORTED_VERSIONS
}
SOURCE = {"100": WIRE_1X, "040": WIRE_04X, "020": WIRE_02X}
EXPECTED = {
    ("100", "100"): WIRE_1X,
    ("100", "040"): WIRE_04X,
    ("100", "020"): WIRE_02X,
    ("040", "100"): WIRE_04X_UP,
    ("040", "040"): WIRE_04X,
    ("040", "020"): WIRE_02X,
    ("020", "100"): WIRE_02X_TO_1X,
    ("020", "040"): WIRE_02X_TO_04X,
    ("020", "020"): WIRE_02X,
}


def fixture(version: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SOURCE[FAMILY[version]].replace("@V@", version))
    return loaded


@pytest.mark.parametrize("source", results.SUPPORTED_VERSIONS)
@pytest.mark.parametrize("target", results.SUPPORTED_VERSIONS)
def test_every_version_pair(source: str, target: str) -> None:
    expected = EXPECTED[FAMILY[source], FAMILY[target]].replace("@V@", target)
    converted = results.convert(fixture(source), target)
    assert converted["cniVersion"] == target
    assert results.dumps(converted) == expected


@pytest.mark.parametrize("version", results.SUPPORTED_VERSIONS)
def test_fixtures_are_their_own_wire_form(version: str) -> None:
    assert results.dumps(fixture(version)) == SOURCE[FAMILY[version]].replace("@V@", version)


def test_convert_returns_new_dicts() -> None:
    source = fixture("1.1.0")
    before = json.dumps(source)
    for target in results.SUPPORTED_VERSIONS:
        converted = results.convert(source, target)
        converted["dns"]["domain"] = "changed"
    assert json.dumps(source) == before


# --------------------------------------------------------------------------------------------
# Byte-exact encodings from the behaviour spec and upstream fixtures


def test_shim_prints_daemon_result_at_031() -> None:
    """A 1.1.0 daemon result printed by a 0.3.1 shim (docs/upstream.md, "Shim output")."""
    daemon = {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/var/run/netns/x"}],
        "ips": [{"interface": 2, "address": "10.244.1.5/24", "gateway": "10.244.1.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.1.1"}],
    }
    assert results.dumps_indent(results.convert(daemon, "0.3.1")) == (
        "{\n"
        '    "cniVersion": "0.3.1",\n'
        '    "interfaces": [\n'
        "        {\n"
        '            "name": "eth0",\n'
        '            "mac": "aa:bb:cc:dd:ee:ff",\n'
        '            "sandbox": "/var/run/netns/x"\n'
        "        }\n"
        "    ],\n"
        '    "ips": [\n'
        "        {\n"
        '            "version": "4",\n'
        '            "interface": 2,\n'
        '            "address": "10.244.1.5/24",\n'
        '            "gateway": "10.244.1.1"\n'
        "        }\n"
        "    ],\n"
        '    "routes": [\n'
        "        {\n"
        '            "dst": "0.0.0.0/0",\n'
        '            "gw": "10.244.1.1"\n'
        "        }\n"
        "    ],\n"
        '    "dns": {}\n'
        "}"
    )


APPENDIX_B_BODY = (
    '{"Result":{"cniVersion":"1.1.0","interfaces":[{"mac":"aa:bb:cc:dd:ee:ff","name":"eth0",'
    '"sandbox":"/var/run/netns/cni-1"}],"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1",'
    '"interface":0}],"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"}]}}'
)


def test_daemon_response_body_appendix_b() -> None:
    """Appendix B: the daemon's HEAD body (sorted keys, no empty dns) from a struct-order 1.0."""
    struct_order_100 = {
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/var/run/netns/cni-1"}
        ],
        "ips": [{"interface": 0, "address": "10.244.1.5/24", "gateway": "10.244.1.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.1.1"}],
        "dns": {},
    }
    body = '{"Result":' + results.dumps(results.convert(struct_order_100, results.LATEST)) + "}"
    assert body == APPENDIX_B_BODY


def test_decode_response_round_trip() -> None:
    result = results.decode_response(APPENDIX_B_BODY.encode())
    assert result is not None
    assert '{"Result":' + results.dumps(result) + "}" == APPENDIX_B_BODY


# libcni pkg/types/100/types_test.go testResult(), as JSON a plugin would print.
UPSTREAM_100 = {
    "cniVersion": "1.1.0",
    "interfaces": [
        {
            "name": "eth0",
            "mac": "00:11:22:33:44:55",
            "mtu": 1500,
            "sandbox": "/proc/3553/ns/net",
            "pciID": "8086:9a01",
            "socketPath": "/path/to/vhost/fd",
        }
    ],
    "ips": [
        {"interface": 0, "address": "1.2.3.30/24", "gateway": "1.2.3.1"},
        {"interface": 0, "address": "abcd:1234:ffff::cdde/64", "gateway": "abcd:1234:ffff::1"},
    ],
    "routes": [
        {"dst": "15.5.6.0/24", "gw": "15.5.6.8"},
        {"dst": "1111:dddd::/80", "gw": "1111:dddd::aaaa"},
    ],
    "dns": {
        "nameservers": ["1.2.3.4", "1::cafe"],
        "domain": "acompany.com",
        "search": ["somedomain.com", "otherdomain.net"],
        "options": ["foo", "bar"],
    },
}


def test_upstream_fixture_print_110() -> None:
    assert results.dumps_indent(UPSTREAM_100) == (
        "{\n"
        '    "cniVersion": "1.1.0",\n'
        '    "dns": {\n'
        '        "domain": "acompany.com",\n'
        '        "nameservers": [\n'
        '            "1.2.3.4",\n'
        '            "1::cafe"\n'
        "        ],\n"
        '        "options": [\n'
        '            "foo",\n'
        '            "bar"\n'
        "        ],\n"
        '        "search": [\n'
        '            "somedomain.com",\n'
        '            "otherdomain.net"\n'
        "        ]\n"
        "    },\n"
        '    "interfaces": [\n'
        "        {\n"
        '            "mac": "00:11:22:33:44:55",\n'
        '            "mtu": 1500,\n'
        '            "name": "eth0",\n'
        '            "pciID": "8086:9a01",\n'
        '            "sandbox": "/proc/3553/ns/net",\n'
        '            "socketPath": "/path/to/vhost/fd"\n'
        "        }\n"
        "    ],\n"
        '    "ips": [\n'
        "        {\n"
        '            "address": "1.2.3.30/24",\n'
        '            "gateway": "1.2.3.1",\n'
        '            "interface": 0\n'
        "        },\n"
        "        {\n"
        '            "address": "abcd:1234:ffff::cdde/64",\n'
        '            "gateway": "abcd:1234:ffff::1",\n'
        '            "interface": 0\n'
        "        }\n"
        "    ],\n"
        '    "routes": [\n'
        "        {\n"
        '            "dst": "15.5.6.0/24",\n'
        '            "gw": "15.5.6.8"\n'
        "        },\n"
        "        {\n"
        '            "dst": "1111:dddd::/80",\n'
        '            "gw": "1111:dddd::aaaa"\n'
        "        }\n"
        "    ]\n"
        "}"
    )


def test_upstream_fixture_at_010_and_040() -> None:
    dns = (
        '"dns":{"nameservers":["1.2.3.4","1::cafe"],"domain":"acompany.com",'
        '"search":["somedomain.com","otherdomain.net"],"options":["foo","bar"]}'
    )
    assert results.dumps(results.convert(UPSTREAM_100, "0.1.0")) == (
        '{"cniVersion":"0.1.0",'
        '"ip4":{"ip":"1.2.3.30/24","gateway":"1.2.3.1",'
        '"routes":[{"dst":"15.5.6.0/24","gw":"15.5.6.8"}]},'
        '"ip6":{"ip":"abcd:1234:ffff::cdde/64","gateway":"abcd:1234:ffff::1",'
        '"routes":[{"dst":"1111:dddd::/80","gw":"1111:dddd::aaaa"}]},' + dns + "}"
    )
    assert results.dumps(results.convert(UPSTREAM_100, "0.4.0")) == (
        '{"cniVersion":"0.4.0",'
        '"interfaces":[{"name":"eth0","mac":"00:11:22:33:44:55","sandbox":"/proc/3553/ns/net"}],'
        '"ips":[{"version":"4","interface":0,"address":"1.2.3.30/24","gateway":"1.2.3.1"},'
        '{"version":"6","interface":0,"address":"abcd:1234:ffff::cdde/64",'
        '"gateway":"abcd:1234:ffff::1"}],'
        '"routes":[{"dst":"15.5.6.0/24","gw":"15.5.6.8"},'
        '{"dst":"1111:dddd::/80","gw":"1111:dddd::aaaa"}],' + dns + "}"
    )


def test_html_escaping_and_nil_dst() -> None:
    result = {
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "a<b>&c"}],
        "routes": [{"gw": "1.1.1.1"}],
    }
    assert results.dumps(result) == (
        '{"cniVersion":"0.4.0","interfaces":[{"name":"a\\u003cb\\u003e\\u0026c"}],'
        '"routes":[{"dst":"\\u003cnil\\u003e","gw":"1.1.1.1"}],"dns":{}}'
    )


def test_1x_numbers_pass_through_float64() -> None:
    result: dict[str, Any] = {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "e", "mtu": 2**53 + 1}],
    }
    assert results.dumps(result) == (
        '{"cniVersion":"1.1.0","interfaces":[{"mtu":9007199254740992,"name":"e"}]}'
    )
    result["interfaces"][0]["mtu"] = 2**63 - 1
    assert '"mtu":9223372036854776000' in results.dumps(result)
    # 0.x results are plain struct encodings: no float64 on the way.
    down = {"cniVersion": "0.4.0", "routes": [{"dst": "1.0.0.0/8", "mtu": 2**53 + 1}]}
    assert '"mtu":9007199254740993' in results.dumps(down)


# --------------------------------------------------------------------------------------------
# decode(): what libcni does to a plugin's stdout


def test_decode_missing_version_takes_config_version() -> None:
    out = results.decode(b'{"ips":[{"version":"4","address":"10.1.0.2/16"}]}', "0.3.1")
    assert out == {
        "cniVersion": "0.3.1",
        "ips": [{"version": "4", "address": "10.1.0.2/16"}],
        "dns": {},
    }
    assert results.decode(b'{"cniVersion":""}', "")["cniVersion"] == "0.1.0"
    assert results.decode(b'{"cniVersion":1}', "1.0.0")["cniVersion"] == "1.0.0"
    assert results.decode(b"null", "1.1.0") == {"cniVersion": "1.1.0", "dns": {}}


def test_decode_output_version_wins_over_config() -> None:
    assert results.decode(b'{"cniVersion":"0.2.0"}', "1.0.0") == {
        "cniVersion": "0.2.0",
        "dns": {},
    }


def test_decode_float_only_survives_the_map_round_trip() -> None:
    body = b'{"interfaces":[{"name":"eth0","mtu":1500.0}]}'
    assert results.decode(body, "1.0.0")["interfaces"] == [{"name": "eth0", "mtu": 1500}]
    with pytest.raises(CNIError) as err:
        results.decode(b'{"cniVersion":"1.0.0",' + body[1:], "1.0.0")
    assert err.value.code == 6
    assert err.value.msg == (
        "json: cannot unmarshal number 1500.0 into Go struct field "
        "Interface.interfaces.mtu of type int"
    )


def test_decode_field_normalization() -> None:
    stdout = json.dumps(
        {
            "cniVersion": "1.0.0",
            "Interfaces": [{"NAME": "eth0", "Mac": "aa:aa:aa:aa:aa:aa", "extra": 1, "mtu": 0}],
            "ips": [
                {"address": "2001:DB8::0001/64", "gateway": "", "interface": 0, "version": "6"},
                {"address": "::ffff:10.1.2.3/120", "gateway": None},
            ],
            "routes": [{"dst": "10.0.0.0/8", "table": 0, "scope": None, "mtu": 0, "advmss": 0}],
            "dns": {"nameservers": [], "domain": ""},
            "unknown": {"x": [1, 2]},
        }
    ).encode()
    out = results.decode(stdout, "1.0.0")
    assert out == {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "aa:aa:aa:aa:aa:aa"}],
        "ips": [
            {"interface": 0, "address": "2001:db8::1/64"},
            {"address": "10.1.2.3/24"},
        ],
        "routes": [{"dst": "10.0.0.0/8", "table": 0}],
        "dns": {},
    }
    assert results.dumps(out) == (
        '{"cniVersion":"1.0.0","interfaces":[{"mac":"aa:aa:aa:aa:aa:aa","name":"eth0"}],'
        '"ips":[{"address":"2001:db8::1/64","interface":0},{"address":"10.1.2.3/24"}],'
        '"routes":[{"dst":"10.0.0.0/8","table":0}]}'
    )


def test_decode_duplicate_keys_last_wins_and_structs_merge() -> None:
    stdout = (
        b'{"cniVersion":"1.1.0","dns":{"domain":"a"},"DNS":{"search":["s"]},'
        b'"interfaces":[{"name":"a","mac":"m"}],"interfaces":[{"name":"b"}],'
        b'"routes":[{"dst":"1.0.0.0/8","gw":"1.1.1.1"}],"routes":[{"dst":"2.0.0.0/8"}]}'
    )
    out = results.decode(stdout, "1.1.0")
    assert out["dns"] == {"domain": "a", "search": ["s"]}
    # Interfaces decode into the existing element (merge); routes have UnmarshalJSON (fresh).
    assert out["interfaces"] == [{"name": "b", "mac": "m"}]
    assert out["routes"] == [{"dst": "2.0.0.0/8"}]


def test_decode_040_ip_without_version_keeps_empty_version() -> None:
    out = results.decode(b'{"cniVersion":"0.3.1","ips":[{"address":"10.0.0.2/24"}]}', "0.3.1")
    assert results.dumps(out) == (
        '{"cniVersion":"0.3.1","ips":[{"version":"","address":"10.0.0.2/24"}],"dns":{}}'
    )
    # ... which 0.2.0 cannot express: convertTo02x goes by the version field.
    with pytest.raises(CNIError) as err:
        results.convert(out, "0.2.0")
    assert (err.value.code, err.value.msg) == (999, "cannot convert: no valid IP addresses")


def test_decode_020_keeps_route_extras() -> None:
    stdout = (
        b'{"cniVersion":"0.2.0",'
        b'"ip4":{"ip":"10.0.0.2/24","routes":[{"dst":"0.0.0.0/0","mtu":9000}]}}'
    )
    out = results.decode(stdout, "0.2.0")
    assert results.dumps(out) == (
        '{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24",'
        '"routes":[{"dst":"0.0.0.0/0","mtu":9000}]},"dns":{}}'
    )
    assert results.dumps(results.convert(out, "0.1.0")).startswith('{"cniVersion":"0.1.0"')


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        (b"", "unexpected end of JSON input"),
        (b'{"cniVersion":', "unexpected end of JSON input"),
        (b"nope", "invalid character 'o' in literal null (expecting 'u')"),
        (b"{x}", "invalid character 'x' looking for beginning of object key string"),
        (b'{"a" 1}', "invalid character '1' after object key"),
        (b'{"a":1 "b":2}', "invalid character '\"' after object key:value pair"),
        (b'{"a":[1 2]}', "invalid character '2' after array element"),
        (b"{} {}", "invalid character '{' after top-level value"),
        (b'{"a":NaN}', "invalid character 'N' looking for beginning of value"),
        (b'{"a":"\\x"}', "invalid character 'x' in string escape code"),
        (
            b"[]",
            "failed to unmarshal raw result: json: cannot unmarshal array into Go value "
            "of type map[string]interface {}",
        ),
        (
            b'"x"',
            "failed to unmarshal raw result: json: cannot unmarshal string into Go value "
            "of type map[string]interface {}",
        ),
        (
            b'{"cniVersion":"1.0.0","interfaces":{}}',
            "json: cannot unmarshal object into Go struct field Result.interfaces of type "
            "[]*types100.Interface",
        ),
        (
            b'{"cniVersion":"1.0.0","interfaces":["eth0"]}',
            "json: cannot unmarshal string into Go struct field Result.interfaces of type "
            "types100.Interface",
        ),
        (
            b'{"cniVersion":"0.4.0","interfaces":[{"name":1}]}',
            "json: cannot unmarshal number into Go struct field Interface.interfaces.name "
            "of type string",
        ),
        (
            b'{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/24","interface":"0"}]}',
            "json: cannot unmarshal string into Go struct field Result.ips.interface of type int",
        ),
        (
            b'{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1"}]}',
            "invalid CIDR address: 10.0.0.1",
        ),
        (
            b'{"cniVersion":"1.0.0","ips":[{"address":"fe80::1%eth0/64"}]}',
            "invalid CIDR address: fe80::1%eth0/64",
        ),
        (
            b'{"cniVersion":"1.0.0","routes":[{"dst":"0.0.0.0/0","gw":"010.0.0.1"}]}',
            "invalid IP address: 010.0.0.1",
        ),
        (
            b'{"cniVersion":"1.0.0","routes":[{"dst":true}]}',
            "json: cannot unmarshal bool into Go struct field Result.routes.dst of type string",
        ),
        (b'{"cniVersion":"1.0.0","routes":[{"dst":null}]}', "invalid CIDR address: "),
        (
            b'{"cniVersion":"0.1.0","ip4":{"ip":"1.2.3.4/8","routes":[{"dst":"0.0.0.0/0","gw":1}]}}',
            "json: cannot unmarshal number into Go struct field Result.ip4.routes.gw "
            "of type net.IP",
        ),
        (
            b'{"cniVersion":"1.0.0","dns":{"search":"x"}}',
            "json: cannot unmarshal string into Go struct field DNS.dns.search of type []string",
        ),
        (
            b'{"cniVersion":"1.0.0","dns":[]}',
            "json: cannot unmarshal array into Go struct field Result.dns of type types.DNS",
        ),
        (
            b'{"cniVersion":"1.0.0","routes":[{"dst":"1.0.0.0/8","table":1e3}]}',
            "json: cannot unmarshal number 1e3 into Go struct field Result.routes.table "
            "of type int",
        ),
    ],
)
def test_decode_errors(stdout: bytes, message: str) -> None:
    with pytest.raises(CNIError) as err:
        results.decode(stdout, "1.0.0")
    assert err.value.code == 6
    assert err.value.msg == message


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        (b'{"cniVersion":"0.5.0"}', 'unsupported CNI result version "0.5.0"'),
        (
            b'{"cniVersion":"0.4.0","CNIVERSION":"1.0.0"}',
            'result type supports [0.3.0 0.3.1 0.4.0] but unmarshalled CNIVersion is "1.0.0"',
        ),
        (
            b'{"cniVersion":"0.2.0","CniVersion":"0.4.0"}',
            'result type supports [ 0.1.0 0.2.0] but unmarshalled CNIVersion is "0.4.0"',
        ),
    ],
)
def test_decode_version_errors(stdout: bytes, message: str) -> None:
    with pytest.raises(CNIError) as err:
        results.decode(stdout, "1.0.0")
    assert (err.value.code, err.value.msg) == (1, message)


def test_create_from_bytes_reads_a_libcni_cache_result() -> None:
    # The "result" of a Multus upstream test's libcni cache file (multus_cni100_test.go).
    cached = (
        b'{"cniVersion":"0.3.1","dns":{},"interfaces":[{"mac":"ea:19:25:a2:a1:93","name":"cni0"},'
        b'{"mac":"ba:76:61:2f:8b:ca","name":"vethc42d3d18"},{"mac":"7e:57:6a:9b:6b:b5",'
        b'"name":"eth0","sandbox":"/var/run/netns/8b8677c8-8929-4746-8206-514069760f6e"}],'
        b'"ips":[{"address":"10.244.1.4/24","gateway":"10.244.1.1","interface":2,"version":"4"}],'
        b'"routes":[{"dst":"10.244.0.0/16"},{"dst":"0.0.0.0/0","gw":"10.244.1.1"}]}'
    )
    out = results.create_from_bytes(cached)
    assert out["ips"] == [
        {"version": "4", "interface": 2, "address": "10.244.1.4/24", "gateway": "10.244.1.1"}
    ]
    assert results.has_interfaces_or_ips(out)
    assert results.create_from_bytes(b"{}") == {"cniVersion": "0.1.0", "dns": {}}
    with pytest.raises(CNIError) as err:
        results.create_from_bytes(b'{"cniVersion":5}')
    assert err.value.msg == (
        "decoding version from network config: json: cannot unmarshal number into Go struct "
        "field .cniVersion of type string"
    )
    with pytest.raises(CNIError) as err:
        results.create_from_bytes(b"[]")
    assert err.value.msg == (
        "decoding version from network config: json: cannot unmarshal array into Go value of "
        'type struct { CNIVersion string "json:\\"cniVersion\\"" }'
    )


# --------------------------------------------------------------------------------------------
# decode_response(): the shim's view of the daemon's answer


def test_decode_response_variants() -> None:
    assert results.decode_response(b'{"Result":null}') is None
    assert results.decode_response(b"{}") is None
    assert results.decode_response(b"null") is None
    # Case-insensitive field, no version check, "" → 1.1.0 as PrintResult does.
    assert results.decode_response(b'{"result":{"ips":[{"address":"10.0.0.2/8"}]}}') == {
        "cniVersion": "1.1.0",
        "ips": [{"address": "10.0.0.2/8"}],
        "dns": {},
    }
    with pytest.raises(CNIError) as err:
        results.decode_response(b'{"Result":5}')
    assert err.value.msg == (
        "json: cannot unmarshal number into Go struct field Response.Result of type types100.Result"
    )
    with pytest.raises(CNIError) as err:
        results.decode_response(b"[]")
    assert err.value.msg == "json: cannot unmarshal array into Go value of type api.Response"


# --------------------------------------------------------------------------------------------
# convert(): errors and the rules that are easy to get wrong


def test_convert_errors() -> None:
    with pytest.raises(CNIError) as err:
        results.convert(fixture("0.3.1"), "0.5.0")
    assert (err.value.code, err.value.msg) == (
        999,
        "no converter for CNI result version 0.3.1 to 0.5.0",
    )
    with pytest.raises(CNIError) as err:
        results.convert({"cniVersion": "2.0.0"}, "1.0.0")
    assert err.value.msg == "no converter for CNI result version 2.0.0 to 1.0.0"
    no_ips = {"cniVersion": "1.1.0", "interfaces": [{"name": "eth0"}]}
    for target in ("0.1.0", "0.2.0"):
        with pytest.raises(CNIError) as err:
            results.convert(no_ips, target)
        assert (err.value.code, err.value.msg) == (999, "cannot convert: no valid IP addresses")
    null_entry = {"cniVersion": "1.0.0", "interfaces": [None]}
    with pytest.raises(CNIError) as err:
        results.convert(null_entry, "0.4.0")
    assert err.value.msg == "runtime error: invalid memory address or nil pointer dereference"
    # Same version and 1.0 <-> 1.1 never look inside, like upstream.
    assert results.convert(null_entry, "1.1.0")["interfaces"] == [None]


def test_empty_to_version_means_010() -> None:
    assert results.convert(fixture("1.1.0"), "")["cniVersion"] == "0.1.0"


def test_convert_to_02x_picks_first_ip_per_family() -> None:
    result = {
        "cniVersion": "1.0.0",
        "ips": [
            {"address": "fd00::2/64"},
            {"address": "10.0.0.2/24", "gateway": "10.0.0.1"},
            {"address": "10.0.0.3/24"},
            {"address": "fd00::3/64", "gateway": "fd00::1"},
        ],
        "routes": [
            {"dst": "192.168.0.0/16", "mtu": 1400, "table": 5},
            {"dst": "::ffff:10.0.0.0/104", "gw": "10.0.0.1"},
            {"gw": "fd00::1"},
        ],
    }
    assert results.dumps(results.convert(result, "0.2.0")) == (
        '{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24","gateway":"10.0.0.1",'
        '"routes":[{"dst":"192.168.0.0/16"},{"dst":"10.0.0.0/8","gw":"10.0.0.1"}]},'
        '"ip6":{"ip":"fd00::2/64","routes":[{"dst":"\\u003cnil\\u003e","gw":"fd00::1"}]},'
        '"dns":{}}'
    )


def test_routes_are_dropped_without_a_slot_of_their_family() -> None:
    result = {
        "cniVersion": "0.4.0",
        "ips": [{"version": "4", "address": "10.0.0.2/24"}],
        "routes": [{"dst": "::/0"}],
    }
    assert results.dumps(results.convert(result, "0.2.0")) == (
        '{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24"},"dns":{}}'
    )


def test_ip_version_going_down_comes_from_the_address() -> None:
    result = {"cniVersion": "1.1.0", "ips": [{"address": "::ffff:1.2.3.4/120"}, {}]}
    assert results.convert(result, "0.4.0")["ips"] == [
        {"version": "4", "address": "1.2.3.4/24"},
        {"version": "6", "address": "<nil>"},
    ]


def test_nil_ness_of_lists() -> None:
    empty_lists = {"cniVersion": "1.1.0", "interfaces": [], "ips": [], "routes": []}
    assert results.has_interfaces_or_ips(empty_lists)  # non-nil slices, as Go sees them
    assert results.to_wire(empty_lists) == {"cniVersion": "1.1.0"}
    assert not results.has_interfaces_or_ips({"cniVersion": "1.1.0"})
    assert not results.has_interfaces_or_ips({**empty_lists, "cniVersion": "0.4.0"})
    assert results.has_interfaces_or_ips({"cniVersion": "0.2.0", "ip6": {"ip": "fd00::1/64"}})
    # Converters always leave a non-nil routes slice behind.
    assert results.convert({"cniVersion": "1.1.0"}, "0.4.0") == {
        "cniVersion": "0.4.0",
        "routes": [],
        "dns": {},
    }


@pytest.mark.parametrize(
    ("version", "wire"),
    [
        (
            "1.1.0",
            '{"cniVersion":"1.1.0","interfaces":[{"name":"net1","sandbox":"/run/netns/p"}],'
            '"ips":[{"address":"0.0.0.0/0","gateway":"0.0.0.0"}]}',
        ),
        (
            "0.3.1",
            '{"cniVersion":"0.3.1","interfaces":[{"name":"net1","sandbox":"/run/netns/p"}],'
            '"ips":[{"version":"4","address":"0.0.0.0/0","gateway":"0.0.0.0"}],"dns":{}}',
        ),
        ("", '{"cniVersion":"0.1.0","ip4":{"ip":"0.0.0.0/0","gateway":"0.0.0.0"},"dns":{}}'),
    ],
)
def test_empty_result(version: str, wire: str) -> None:
    assert results.dumps(results.empty_result(version, "net1", "/run/netns/p")) == wire


# --------------------------------------------------------------------------------------------
# Versions


@pytest.mark.parametrize(
    ("version", "parsed"),
    [
        ("", (0, 1, 0)),
        ("1", (1, 0, 0)),
        ("0.4", (0, 4, 0)),
        ("1.1.0", (1, 1, 0)),
        ("+1.-2.03", (1, -2, 3)),
    ],
)
def test_parse_version(version: str, parsed: tuple[int, int, int]) -> None:
    assert results.parse_version(version) == parsed


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("1.2.3.4", 'invalid version "1.2.3.4": too many parts'),
        (
            "a.1",
            'failed to convert major version part "a": strconv.Atoi: parsing "a": invalid syntax',
        ),
        (
            "1. 2",
            'failed to convert minor version part " 2": strconv.Atoi: parsing " 2": invalid syntax',
        ),
        (
            "1.0.",
            'failed to convert micro version part "": strconv.Atoi: parsing "": invalid syntax',
        ),
        (
            "1.99999999999999999999",
            'failed to convert minor version part "99999999999999999999": '
            'strconv.Atoi: parsing "99999999999999999999": value out of range',
        ),
    ],
)
def test_parse_version_errors(version: str, message: str) -> None:
    with pytest.raises(CNIError) as err:
        results.parse_version(version)
    assert (err.value.code, err.value.msg) == (6, message)


def test_version_ge() -> None:
    assert results.version_ge("0.4.0", "0.4.0")
    assert results.version_ge("1.0.0", "0.4.0")
    assert results.version_ge("0.10.0", "0.4.0")
    assert not results.version_ge("0.3.1", "0.4.0")
    assert not results.version_ge("", "0.4.0")
    assert results.version_ge("1.1.0", "1.1")
    with pytest.raises(CNIError):
        results.version_ge("x", "0.4.0")


def test_supported_versions() -> None:
    assert results.SUPPORTED_VERSIONS == (
        "0.1.0",
        "0.2.0",
        "0.3.0",
        "0.3.1",
        "0.4.0",
        "1.0.0",
        "1.1.0",
    )
    assert results.LATEST == "1.1.0"


# --------------------------------------------------------------------------------------------
# Properties over generated 1.x results

_v4 = st.builds(
    lambda n, p: f"{ipaddress.IPv4Address(n)}/{p}", st.integers(0, 2**32 - 1), st.integers(0, 32)
)
_v6 = st.builds(
    lambda n, p: f"{ipaddress.IPv6Address(n)}/{p}", st.integers(0, 2**128 - 1), st.integers(0, 128)
)
_cidr = st.one_of(_v4, _v6)
_gw = st.one_of(
    st.builds(lambda n: str(ipaddress.IPv4Address(n)), st.integers(0, 2**32 - 1)),
    st.builds(lambda n: str(ipaddress.IPv6Address(n)), st.integers(0, 2**128 - 1)),
)
_text = st.text(max_size=8)
_small = st.integers(-(2**31), 2**31)


def _optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


_iface = st.builds(
    lambda name, rest: {"name": name, **rest},
    _text,
    _optional(mac=_text, mtu=_small, sandbox=_text, socketPath=_text, pciID=_text),
)
_ip = st.builds(
    lambda address, rest: {"address": address, **rest},
    _cidr,
    _optional(gateway=_gw, interface=st.integers(0, 5)),
)
_route = st.builds(
    lambda dst, rest: {"dst": dst, **rest},
    _cidr,
    _optional(gw=_gw, mtu=_small, advmss=_small, priority=_small, table=_small, scope=_small),
)
_dns = _optional(
    nameservers=st.lists(_text, max_size=2),
    domain=_text,
    search=st.lists(_text, max_size=2),
    options=st.lists(_text, max_size=2),
)
results_1x = st.builds(
    lambda version, rest: {"cniVersion": version, **rest},
    st.sampled_from(["1.0.0", "1.1.0"]),
    _optional(
        interfaces=st.lists(_iface, max_size=3),
        ips=st.lists(_ip, max_size=3),
        routes=st.lists(_route, max_size=3),
        dns=_dns,
    ),
)


def _without_1x_only(wire: dict[str, Any]) -> dict[str, Any]:
    out = dict(wire)
    if "interfaces" in out:
        out["interfaces"] = [
            {k: v for k, v in iface.items() if k not in ("mtu", "socketPath", "pciID")}
            for iface in out["interfaces"]
        ]
    return out


@settings(max_examples=150, deadline=None)
@given(results_1x)
def test_round_trip_through_040_keeps_what_both_express(result: dict[str, Any]) -> None:
    down = results.convert(result, "0.4.0")
    back = results.convert(down, result["cniVersion"])
    assert results.to_wire(back) == _without_1x_only(results.to_wire(result))


@settings(max_examples=150, deadline=None)
@given(results_1x, st.sampled_from(results.SUPPORTED_VERSIONS))
def test_wire_form_is_json_and_stable(result: dict[str, Any], target: str) -> None:
    try:
        converted = results.convert(result, target)
    except CNIError as err:  # only 0.1/0.2 can refuse: they need an address
        assert target in ("0.1.0", "0.2.0")
        assert err.msg == "cannot convert: no valid IP addresses"
        assert not result.get("ips")
        return
    wire = results.to_wire(converted)
    text = results.dumps(converted)
    assert json.loads(text) == wire
    assert results.to_wire(wire) == wire  # idempotent
    assert results.normalize(results.normalize(converted)) == results.normalize(converted)
    assert results.dumps_indent(converted) == json.dumps(
        wire, indent=4, ensure_ascii=False
    ).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace(
        "\u2028", "\\u2028"
    ).replace("\u2029", "\\u2029")
    if target.startswith("1."):
        assert list(wire) == sorted(wire)


@settings(max_examples=100, deadline=None)
@given(results_1x)
def test_decode_of_own_output_is_identity(result: dict[str, Any]) -> None:
    # Equal up to nil-ness: an empty list is omitted on the wire, so it decodes as nil.
    decoded = results.decode(results.dumps(result).encode(), "0.1.0")
    assert results.to_wire(decoded) == results.to_wire(result)


# --------------------------------------------------------------------------------------------
# The shim imports this module on every ADD: stdlib only.


def test_import_pulls_in_only_the_stdlib() -> None:
    root = Path(__file__).resolve().parents[3]
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); "
        "import cni_shim.results; print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(root)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert "cni_shim.results" in out
    foreign = [
        name
        for name in out
        if name.split(".")[0] not in sys.stdlib_module_names and name.split(".")[0] != "cni_shim"
    ]
    assert foreign == []


def test_normalizing_a_result_made_here_copies_it_instead_of_decoding_again() -> None:
    """The fast path for canonical dicts this module made gives what a full decode gives, as a
    new dict each time, so a caller's edits to its copy never reach anyone else's."""
    raw = (
        b'{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/ns"}],'
        b'"ips":[{"interface":0,"address":"10.1.0.5/16","gateway":"10.1.0.1"}],'
        b'"routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}]}'
    )
    made = results.decode(raw, "1.0.0")
    slow = results.normalize(dict(made))  # a dict not made here: decoded in full
    fast = results.normalize(made)
    assert fast == slow == made
    assert fast is not made and fast["ips"] is not made["ips"]
    fast["ips"][0]["address"] = "192.0.2.1/24"
    assert results.normalize(made)["ips"][0]["address"] == "10.1.0.5/16"
    assert results.convert(made, "0.4.0") == results.convert(slow, "0.4.0")
    assert results.to_wire(made) == results.to_wire(slow)
