"""Config parsing and per-plugin stdin building (libcni ``conf.go`` / ``buildOneConfig``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cni_shim import errors
from cni_shim.errors import CNIError
from multusd.cni import conf
from multusd.cni.invoke import LibcniError


def test_conf_keeps_raw_bytes_and_reads_fields() -> None:
    raw = b'{"cniVersion":"0.4.0", "Name":"n1","type":"bridge","capabilities":{"ips":true}}'
    parsed = conf.conf_from_bytes(raw)
    assert parsed.raw == raw
    assert (parsed.name, parsed.type, parsed.cni_version) == ("n1", "bridge", "0.4.0")
    assert parsed.capabilities == {"ips": True}


@pytest.mark.parametrize(
    ("raw", "code", "msg"),
    [
        (
            b'{"name":"x"}',
            errors.INVALID_NETWORK_CONFIG,
            "error parsing configuration: missing 'type'",
        ),
        (
            b'{"type":5}',
            errors.DECODING_FAILURE,
            "error parsing configuration: json: cannot unmarshal number into Go struct field "
            "PluginConf.type of type string",
        ),
        (
            b"[1]",
            errors.DECODING_FAILURE,
            "error parsing configuration: json: cannot unmarshal array into Go value of type "
            "types.PluginConf",
        ),
        (
            b"{",
            errors.DECODING_FAILURE,
            "error parsing configuration: unexpected end of JSON input",
        ),
        (
            b'{"type":"x","capabilities":{"a":"yes"}}',
            errors.DECODING_FAILURE,
            "error parsing configuration: json: cannot unmarshal string into Go struct field "
            "PluginConf.capabilities of type bool",
        ),
    ],
)
def test_conf_errors(raw: bytes, code: int, msg: str) -> None:
    with pytest.raises(LibcniError) as info:
        conf.conf_from_bytes(raw)
    assert (info.value.code, info.value.msg) == (code, msg)


LIST = b"""{
  "cniVersion": "1.0.0", "name": "net", "disableCheck": "TRUE",
  "plugins": [
    {"type": "bridge", "mtu": 1500.0, "ipam": {"type": "host-local", "b": 1, "a": 2}},
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
  ]
}"""


def test_conflist_plugins_are_go_reencoded() -> None:
    parsed = conf.conflist_from_bytes(LIST)
    assert parsed.raw == LIST
    assert (parsed.name, parsed.cni_version) == ("net", "1.0.0")
    assert parsed.disable_check is True
    assert parsed.disable_gc is False
    assert [p.raw for p in parsed.plugins] == [
        b'{"ipam":{"a":2,"b":1,"type":"host-local"},"mtu":1500,"type":"bridge"}',
        b'{"capabilities":{"portMappings":true},"snat":true,"type":"portmap"}',
    ]


@pytest.mark.parametrize(
    ("raw", "msg"),
    [
        (b'{"plugins":[]}', "error parsing configuration list: no name"),
        (b'{"name":1}', "error parsing configuration list: invalid name type float64"),
        (
            b'{"name":"n","cniVersion":true}',
            "error parsing configuration list: invalid cniVersion type bool",
        ),
        (b'{"name":"n","plugins":[]}', "error parsing configuration list: no plugins in list"),
        (
            b'{"name":"n","plugins":{}}',
            "error parsing configuration list: invalid 'plugins' type map[string]interface {}",
        ),
        (
            b'{"name":"n","disableGC":"maybe"}',
            'error parsing configuration list: invalid value "maybe" for disableGC',
        ),
        (
            b'{"name":"n","disableGC":1}',
            "error parsing configuration list: invalid type float64 for disableGC",
        ),
        (
            b'{"name":"n","loadOnlyInlinedPlugins":true}',
            "error parsing configuration list: "
            "`loadOnlyInlinedPlugins` is true, and no 'plugins' key",
        ),
        (
            b'{"name":"n","plugins":[{"type":"a"},{"name":"b"}]}',
            "failed to parse plugin config 1: error parsing configuration: missing 'type'",
        ),
        (
            b"nope",
            "error parsing configuration list: "
            "invalid character 'o' in literal null (expecting 'u')",
        ),
    ],
)
def test_conflist_errors(raw: bytes, msg: str) -> None:
    with pytest.raises(CNIError) as info:
        conf.conflist_from_bytes(raw)
    assert info.value.msg == msg


def test_conflist_without_plugins_key_is_empty() -> None:
    assert conf.conflist_from_bytes(b'{"name":"n"}').plugins == ()


def test_cni_versions_picks_highest_supported() -> None:
    raw = (
        b'{"name":"n","cniVersion":"0.3.1","cniVersions":["1.0.0","0.4.0","9.9.9"],'
        b'"plugins":[{"type":"a"}]}'
    )
    assert conf.conflist_from_bytes(raw).cni_version == "1.0.0"


def test_conflist_from_conf() -> None:
    single = conf.conf_from_bytes(b'{"type":"macvlan","name":"m","cniVersion":"0.3.1","z":1.5}')
    wrapped = conf.conflist_from_conf(single)
    assert wrapped.raw == (
        b'{"cniVersion":"0.3.1","name":"m","plugins":[{"cniVersion":"0.3.1","name":"m",'
        b'"type":"macvlan","z":1.5}]}'
    )
    assert (wrapped.name, wrapped.cni_version, len(wrapped.plugins)) == ("m", "0.3.1", 1)


PLUGIN = conf.conf_from_bytes(
    b'{"type":"portmap","name":"own","cniVersion":"0.1.0","capabilities":'
    b'{"portMappings":true,"bandwidth":false},"runtimeConfig":{"old":1},"x":"<&>"}'
)


def test_stdin_injects_name_version_and_keeps_prev_result_order() -> None:
    bare = conf.conf_from_bytes(b'{"type":"t","b":{"d":1,"c":2}}')
    prev = {"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "10.0.0.2/24"}]}
    out = conf.plugin_stdin(bare, name="net", cni_version="0.3.1", prev_result=prev)
    assert out == (
        b'{"b":{"c":2,"d":1},"cniVersion":"0.3.1","name":"net","prevResult":'
        b'{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.0.0.2/24"}]},"type":"t"}'
    )


def test_stdin_runtime_config_is_capability_filtered() -> None:
    args = {
        "portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1},
        "ips": ["10.0.0.5/24"],
    }
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}], "dns": {}}
    out = conf.plugin_stdin(
        PLUGIN, name="net", cni_version="1.0.0", prev_result=prev, capability_args=args
    )
    decoded = json.loads(out)
    assert decoded["runtimeConfig"] == {"portMappings": args["portMappings"]}
    assert (decoded["name"], decoded["cniVersion"]) == ("net", "1.0.0")
    # The second injection round-trips the config (prevResult included) through a Go map, so
    # that is sorted at every level; the runtimeConfig values keep the caller's (struct) order.
    assert out == (
        b'{"capabilities":{"bandwidth":false,"portMappings":true},"cniVersion":"1.0.0",'
        b'"name":"net","prevResult":{"cniVersion":"1.0.0","dns":{},"ips":[{"address":"10.0.0.2/24"}]},'
        b'"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":8080,"protocol":"tcp"}]},'
        b'"type":"portmap","x":"\\u003c\\u0026\\u003e"}'
    )


def test_stdin_without_matching_capability_keeps_runtime_config() -> None:
    out = conf.plugin_stdin(PLUGIN, name="net", cni_version="1.0.0", capability_args={"ips": []})
    assert json.loads(out)["runtimeConfig"] == {"old": 1}


def test_inject_rejects_nil_and_empty_keys() -> None:
    with pytest.raises(LibcniError, match="key 'a' value must not be nil"):
        conf.inject(PLUGIN, {"a": None})
    with pytest.raises(LibcniError, match="keys cannot be empty"):
        conf.inject(PLUGIN, {"": 1})


async def test_files(tmp_path: Path) -> None:
    (tmp_path / "10-a.conflist").write_text(
        '{"name":"a","cniVersion":"1.0.0","plugins":[{"type":"x"}]}'
    )
    (tmp_path / "20-b.conf").write_text('{"name":"b","type":"y"}')
    (tmp_path / "30-c.json").write_text('{"name":"c","type":"z"}')
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "extra.conf").write_text('{"type":"extra"}')
    assert conf.conf_files(str(tmp_path), (".conf", ".json")) == [
        str(tmp_path / "20-b.conf"),
        str(tmp_path / "30-c.json"),
    ]
    listed = await conf.conflist_from_file(str(tmp_path / "10-a.conflist"))
    assert [p.type for p in listed.plugins] == ["x", "extra"]
    single = await conf.network_from_file(str(tmp_path / "20-b.conf"))
    assert (single.name, [p.type for p in single.plugins]) == ("b", ["y"])
    with pytest.raises(LibcniError) as info:
        await conf.conf_from_file(str(tmp_path / "missing.conf"))
    missing = tmp_path / "missing.conf"
    assert info.value.msg == f"error reading {missing}: open {missing}: no such file or directory"


async def test_conflist_file_without_plugins(tmp_path: Path) -> None:
    (tmp_path / "n.conflist").write_text('{"name":"n"}')
    with pytest.raises(LibcniError, match="no plugin configs found"):
        await conf.conflist_from_file(str(tmp_path / "n.conflist"))
