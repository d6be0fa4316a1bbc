"""The generated multus config: primary selection, loading, rendering (upstream's cases and its
sample thick DaemonSet config)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from multusd.config.generate import (
    Primary,
    PrimaryConfigError,
    PrimaryListError,
    check_not_recursive,
    check_version_compatibility,
    enabled_capabilities,
    first_candidate,
    force_cni_version,
    generator_config,
    parse_primary,
    primary_network_name,
    primary_path,
    read_primary,
    render,
    scan_for_primary,
)
from multusd.errors import EXIT_CONFIG, ConfigError

PRIMARY_FILE = "/etc/cni/net.d/10-flannel.conf"

FLANNEL_CONFLIST = {
    "name": "cbr0",
    "cniVersion": "0.3.1",
    "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}


def _upstream_test_conf() -> dict[str, Any]:
    # The daemon config upstream's generator tests start from.
    return {"name": "myCNI", "cniVersion": "0.4.0", "clusterNetwork": PRIMARY_FILE}


def _render_with_caps(primary_doc: dict[str, Any]) -> str:
    conf = generator_config(_upstream_test_conf())
    return render(conf, Primary(PRIMARY_FILE, primary_doc)).decode()


# --------------------------------------------------------------------------------------------
# Rendering: upstream's generator cases (their MatchJSON; we also pin the key order)


def test_basic_multus_config() -> None:
    conf = generator_config(_upstream_test_conf())
    assert render(conf).decode() == (
        '{"cniVersion":"0.4.0","name":"multus-cni-network",'
        f'"clusterNetwork":"{PRIMARY_FILE}","type":"multus-shim"}}'
    )


@pytest.mark.parametrize(
    ("primary_doc", "capabilities"),
    [
        ({"capabilities": {"portMappings": True}}, '{"portMappings":true}'),
        (
            {"capabilities": {"portMappings": True, "tuning": True}},
            '{"portMappings":true,"tuning":true}',
        ),
        ({"capabilities": {"portMappings": True, "tuning": False}}, '{"portMappings":true}'),
        (
            {"plugins": [{"capabilities": {"portMappings": True, "tuning": True}}]},
            '{"portMappings":true,"tuning":true}',
        ),
        (
            {
                "plugins": [
                    {"capabilities": {"portMappings": True}},
                    {"capabilities": {"tuning": True}},
                ]
            },
            '{"portMappings":true,"tuning":true}',
        ),
        (
            {
                "plugins": [
                    {"capabilities": {"portMappings": True}},
                    {"capabilities": {"tuning": False}},
                ]
            },
            '{"portMappings":true}',
        ),
    ],
    ids=[
        "single",
        "multiple",
        "only-enabled",
        "plugin",
        "multiple-plugins",
        "plugins-only-enabled",
    ],
)
def test_capabilities_from_the_primary(primary_doc: dict[str, Any], capabilities: str) -> None:
    assert _render_with_caps(primary_doc) == (
        f'{{"capabilities":{capabilities},"cniVersion":"0.4.0","name":"multus-cni-network",'
        f'"clusterNetwork":"{PRIMARY_FILE}","type":"multus-shim"}}'
    )


def test_capabilities_are_sorted_and_merged_into_the_daemon_ones() -> None:
    conf = generator_config(
        {"cniVersion": "0.3.1", "capabilities": {"zeta": True, "bandwidth": True}}
    )
    doc = {"plugins": [{"capabilities": {"portMappings": True, "bandwidth": False}}]}
    out = json.loads(render(conf, Primary("/p/10.conflist", doc)))
    # merged, never removed: the daemon's own "bandwidth" survives the primary's false
    assert list(out["capabilities"].items()) == [
        ("bandwidth", True),
        ("portMappings", True),
        ("zeta", True),
    ]


def test_empty_plugins_list_falls_back_to_top_level_capabilities() -> None:
    assert enabled_capabilities({"plugins": [], "capabilities": {"a": True}}) == ["a"]
    assert enabled_capabilities(
        {"plugins": [{"capabilities": {"b": True}}], "capabilities": {"a": True}}
    ) == ["b"]
    assert enabled_capabilities({"plugins": ["junk", {"capabilities": "x"}]}) == []


@pytest.mark.parametrize(
    "doc",
    [{"capabilities": {"a": "yes"}}, {"plugins": {"a": 1}}, {"plugins": None}],
    ids=["non-bool", "plugins-object", "plugins-null"],
)
def test_malformed_capabilities_are_errors_not_crashes(doc: dict[str, Any]) -> None:
    with pytest.raises(PrimaryConfigError):
        enabled_capabilities(doc)


def test_sample_daemonset_config_is_byte_identical() -> None:
    """Upstream's sample thick DaemonSet config and a flannel conflist."""
    raw = {
        "chrootDir": "/hostroot",
        "cniVersion": "0.3.1",
        "logLevel": "verbose",
        "logToStderr": True,
        "cniConfigDir": "/host/etc/cni/net.d",
        "multusAutoconfigDir": "/host/etc/cni/net.d",
        "multusConfigFile": "auto",
        "socketDir": "/host/run/multus/",
    }
    conf = generator_config(raw)
    path = primary_path(conf.multus_autoconfig_dir, "10-flannel.conflist")
    primary = parse_primary(path, json.dumps(FLANNEL_CONFLIST).encode(), conf.cni_version)
    assert render(conf, primary) == (
        b'{"capabilities":{"portMappings":true},"cniVersion":"0.3.1","logLevel":"verbose",'
        b'"logToStderr":true,"name":"multus-cni-network",'
        b'"clusterNetwork":"/host/etc/cni/net.d/10-flannel.conflist","type":"multus-shim"}'
    )


def test_upstream_example_clears_readiness_and_keeps_isolation_keys() -> None:
    raw = {
        "cniVersion": "0.3.1",
        "logLevel": "verbose",
        "logToStderr": True,
        "namespaceIsolation": True,
        "globalNamespaces": "default,kube-system",
        "capabilities": {"bandwidth": True},
        "readinessindicatorfile": "/d/10-flannel.conflist",
        "multusAutoconfigDir": "/d",
    }
    conf = generator_config(raw)
    primary = Primary("/d/10-flannel.conflist", FLANNEL_CONFLIST)
    assert render(conf, primary) == (
        b'{"capabilities":{"bandwidth":true,"portMappings":true},"cniVersion":"0.3.1",'
        b'"logLevel":"verbose","logToStderr":true,"name":"multus-cni-network",'
        b'"clusterNetwork":"/d/10-flannel.conflist","namespaceIsolation":true,'
        b'"globalNamespaces":"default,kube-system","type":"multus-shim"}'
    )


def test_every_key_in_struct_order_and_the_cleared_ones_gone() -> None:
    raw = {
        "overrideNetworkName": False,
        "forceCNIVersion": True,
        "multusAutoconfigDir": "/auto",
        "multusMasterCNI": "10.conf",
        "multusConfigFile": "auto",
        "daemonSocketDir": "/run/multus",
        "auxiliaryCNIChainName": "aux",
        "cniConfigDir": "/etc/cni/net.d",
        "cniDir": "/var/lib/cni/multus",
        "type": "my-shim",
        "readinessindicatorfile": "/ready",
        "globalNamespaces": "a,b",
        "namespaceIsolation": True,
        "clusterNetwork": "ignored",
        "name": "ignored",
        "logOptions": {"compress": True, "maxBackups": 2, "maxSize": 0, "maxAge": 5},
        "logToStderr": True,
        "logLevel": "debug",
        "logFile": "/var/log/m.log",
        "cniVersion": "1.0.0",
        "capabilities": {"ips": True},
        "binDir": "/opt/cni/bin",
        "socketDir": "/run/x",  # not a generator key
        "unknownKey": 1,
    }
    out = render(generator_config(raw), Primary("/auto/10.conf", {"cniVersion": "1.0.0"}))
    assert out == (
        b'{"binDir":"/opt/cni/bin","capabilities":{"ips":true},"cniVersion":"1.0.0",'
        b'"logFile":"/var/log/m.log","logLevel":"debug","logToStderr":true,'
        b'"logOptions":{"maxAge":5,"maxSize":0,"maxBackups":2,"compress":true},'
        b'"name":"multus-cni-network","clusterNetwork":"/auto/10.conf",'
        b'"namespaceIsolation":true,"globalNamespaces":"a,b","type":"my-shim",'
        b'"cniDir":"/var/lib/cni/multus","auxiliaryCNIChainName":"aux",'
        b'"daemonSocketDir":"/run/multus"}'
    )


def test_empty_log_options_object_is_still_emitted_and_null_is_not() -> None:
    base = {"cniVersion": "0.3.1"}
    assert b'"logOptions":{}' in render(generator_config({**base, "logOptions": {}}))
    assert b"logOptions" not in render(generator_config({**base, "logOptions": None}))


def test_cni_version_is_always_emitted_even_empty_and_html_is_escaped() -> None:
    out = render(generator_config({"logFile": "/var/log/a&b<c>.log"}))
    assert out == (
        b'{"cniVersion":"","logFile":"/var/log/a\\u0026b\\u003cc\\u003e.log",'
        b'"name":"multus-cni-network","type":"multus-shim"}'
    )


def test_generator_config_forces_the_name_and_matches_keys_like_go() -> None:
    conf = generator_config({"NAME": "x", "CNIVERSION": "0.4.0", "multusautoconfigdir": "/d"})
    assert (conf.name, conf.cni_version, conf.multus_autoconfig_dir) == (
        "multus-cni-network",
        "0.4.0",
        "/d",
    )
    assert (conf.type, conf.cni_config_dir, conf.multus_config_file, conf.capabilities) == (
        "multus-shim",
        "/etc/cni/net.d",
        "auto",
        {},
    )


def test_generator_config_type_error_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        generator_config({"name": 5})
    assert info.value.exit_code == EXIT_CONFIG
    assert str(info.value).startswith("failed to unmarshall the daemon configuration: ")


# --------------------------------------------------------------------------------------------
# overrideNetworkName (upstream's manager cases)


def test_override_network_name_uses_the_primary_name() -> None:
    path = "/tmp/multus-config/00-mycni.conf"
    conf = generator_config({"cniVersion": "0.4.0", "overrideNetworkName": True})
    doc = {"cniVersion": "0.4.0", "name": "mycni-name", "type": "mycni", "ipam": {}, "dns": {}}
    assert render(conf, Primary(path, doc)).decode() == (
        f'{{"cniVersion":"0.4.0","name":"mycni-name","clusterNetwork":"{path}",'
        '"type":"multus-shim","overrideNetworkName":true}'
    )


def test_override_network_name_errors() -> None:
    with pytest.raises(PrimaryConfigError) as missing:
        primary_network_name({"type": "x"})
    assert str(missing.value) == (
        "could not override the network name: failed to access delegate CNI plugin name"
    )
    with pytest.raises(PrimaryConfigError) as empty:
        primary_network_name(
            {"name": "", "cniVersion": "0.4.0", "mtu": 1500, "big": 1e6, "x": None}
        )
    assert str(empty.value) == (
        "could not override the network name: the primary CNI Configuration does not feature "
        "the network name: map[big:1e+06 cniVersion:0.4.0 mtu:1500 name: x:<nil>]"
    )


# --------------------------------------------------------------------------------------------
# Choosing the primary


def test_first_candidate_rules() -> None:
    names = [
        "99-loopback.conf",
        "00-multus.conf",
        "00-multusXYZ.conflist",
        "05-x.json",
        "10-b.conflist",
        "10-a.conf",
        "README",
        ".00-multus.conf.abc.tmp",
    ]
    assert first_candidate(names) == "10-a.conf"
    assert first_candidate([".conf", "a.conf"]) == ".conf"  # Go's filepath.Ext
    assert first_candidate(["B.conf", "a.conf"]) == "B.conf"  # byte order
    assert first_candidate(["00-multus.conf", "x.json", "conf"]) is None


def test_scan_identifies_the_primary(tmp_path: Path) -> None:
    # Upstream: "00-mycni.conf" wins over the daemon config "10-testcni.conf" beside it.
    (tmp_path / "00-mycni.conf").write_text("{}")
    (tmp_path / "10-testcni.conf").write_text("{}")
    (tmp_path / "00-multus.conf").write_text("{}")
    assert scan_for_primary(str(tmp_path)) == "00-mycni.conf"


def test_scan_of_an_empty_dir_is_none_and_a_missing_dir_is_enoent(tmp_path: Path) -> None:
    assert scan_for_primary(str(tmp_path)) is None
    missing = str(tmp_path / "nope")
    with pytest.raises(PrimaryListError) as info:
        scan_for_primary(missing)
    assert info.value.errno == errno.ENOENT
    assert str(info.value) == (
        "error when listing the CNI plugin configurations: "
        f"open {missing}: no such file or directory"
    )
    with pytest.raises(PrimaryListError) as empty:
        scan_for_primary("")
    assert empty.value.errno == errno.ENOENT


def test_primary_path_is_go_join() -> None:
    assert primary_path("/host/etc/cni/net.d/", "10-flannel.conflist") == (
        "/host/etc/cni/net.d/10-flannel.conflist"
    )
    assert primary_path("//a/./b/../c", "x.conf") == "/a/c/x.conf"
    assert primary_path("", "x.conf") == "x.conf"
    assert primary_path("rel", "x.conf") == "rel/x.conf"  # not made absolute, as upstream


def test_recursion_guard() -> None:
    conf = generator_config({"multusAutoconfigDir": "/d", "cniConfigDir": "/d"})
    with pytest.raises(PrimaryConfigError, match=r"^cannot specify /d/00-multus\.conf to prevent"):
        check_not_recursive(conf, "/d/00-multus.conf")
    with pytest.raises(PrimaryConfigError):
        check_not_recursive(conf, "00-multus.conf")  # resolves to our own output
    check_not_recursive(conf, "10-flannel.conflist")


# --------------------------------------------------------------------------------------------
# Loading the primary


async def test_read_errors_use_upstream_text(tmp_path: Path) -> None:
    missing = str(tmp_path / "10.conf")
    with pytest.raises(PrimaryConfigError) as info:
        await read_primary(missing, "0.4.0")
    assert str(info.value) == (
        f"failed to access the primary CNI configuration from {missing}: failed to read the "
        f"cluster primary CNI config {missing}: open {missing}: no such file or directory"
    )
    directory = tmp_path / "dir.conf"
    directory.mkdir()
    with pytest.raises(PrimaryConfigError, match=r": read .*/dir.conf: is a directory$"):
        await read_primary(str(directory), "0.4.0")


@pytest.mark.parametrize(
    ("data", "go_error"),
    [
        (b"", "unexpected end of JSON input"),
        (b'{"cniVersion": "0.4.0",', "unexpected end of JSON input"),
        (b"nope", "invalid character 'o' in literal null (expecting 'u')"),
    ],
)
def test_undecodable_primary(data: bytes, go_error: str) -> None:
    with pytest.raises(PrimaryConfigError) as info:
        parse_primary("/d/10.conf", data, "0.4.0")
    assert str(info.value) == (
        "failed to access the primary CNI configuration from /d/10.conf: "
        f"failed to unmarshall primary CNI config: {go_error}"
    )


def test_non_object_primary() -> None:
    with pytest.raises(PrimaryConfigError, match=r"^couldn't get cni version of delegate$"):
        parse_primary("/d/10.conf", b"[1]", "0.4.0")
    with pytest.raises(PrimaryConfigError, match=r"^couldn't get cni config from delegate$"):
        parse_primary("/d/10.conf", b"[1]", "0.3.1")  # upstream panics here


def test_version_mismatch_message() -> None:
    doc = {"cniVersion": "0.3.1", "name": "mycni-name", "type": "mycni"}
    with pytest.raises(PrimaryConfigError) as info:
        check_version_compatibility("0.4.0", doc)
    assert str(info.value) == "delegate cni version is 0.3.1 while top level cni version is 0.4.0"


@pytest.mark.parametrize(
    ("multus", "delegate"),
    [
        ("0.3.1", {}),  # below 0.4.0 nothing is checked
        ("0.3.1", {"cniVersion": "junk"}),
        ("0.4.0", {"cniVersion": "0.4.0"}),
        ("1.0.0", {"cniVersion": "1.1.0"}),
        ("1.0.0", {"cniVersion": "0.4.1-rc.1+build.5"}),
        ("0.4.0-rc1", {"cniVersion": "0.1.0"}),  # a pre-release sorts before 0.4.0
    ],
)
def test_compatible_versions(multus: str, delegate: dict[str, Any]) -> None:
    check_version_compatibility(multus, delegate)


@pytest.mark.parametrize(
    ("multus", "delegate", "message"),
    [
        ("", {"cniVersion": "1.0.0"}, "couldn't get top level cni version"),
        ("1.0", {"cniVersion": "1.0.0"}, "couldn't get top level cni version"),
        ("1.0.0", {}, "couldn't get cni version of delegate"),
        ("1.0.0", {"cniVersion": 1}, "couldn't get cni version of delegate"),
        ("1.0.0", {"cniVersion": ""}, "Version string empty"),
        ("1.0.0", {"cniVersion": "1.0"}, "No Major.Minor.Patch elements found"),
        ("1.0.0", {"cniVersion": "v1.0.0"}, 'Invalid character(s) found in major number "v1"'),
        ("1.0.0", {"cniVersion": "1.x.0"}, 'Invalid character(s) found in minor number "x"'),
        ("1.0.0", {"cniVersion": "1.0.x"}, 'Invalid character(s) found in patch number "x"'),
        ("1.0.0", {"cniVersion": "01.0.0"}, 'Major number must not contain leading zeroes "01"'),
        ("1.0.0", {"cniVersion": "1.00.0"}, 'Minor number must not contain leading zeroes "00"'),
        ("1.0.0", {"cniVersion": "1..0"}, 'strconv.ParseUint: parsing "": invalid syntax'),
        ("1.0.0", {"cniVersion": "1.0.0-"}, "Prerelease is empty"),
        (
            "1.0.0",
            {"cniVersion": "1.0.0-01"},
            'Numeric PreRelease version must not contain leading zeroes "01"',
        ),
        ("1.0.0", {"cniVersion": "1.0.0-a_b"}, 'Invalid character(s) found in prerelease "a_b"'),
        ("1.0.0", {"cniVersion": "1.0.0+"}, "Build meta data is empty"),
        (
            "1.0.0",
            {"cniVersion": "0.4.0-rc1"},
            "delegate cni version is 0.4.0-rc1 while top level cni version is 1.0.0",
        ),
    ],
)
def test_incompatible_versions(multus: str, delegate: dict[str, Any], message: str) -> None:
    with pytest.raises(PrimaryConfigError) as info:
        check_version_compatibility(multus, delegate)
    assert str(info.value) == message


# --------------------------------------------------------------------------------------------
# forceCNIVersion


def test_force_cni_version_rewrites_as_a_sorted_go_map() -> None:
    data = b'{"type":"mycni","cniVersion":"0.4.0","mtu":1500.0,"big":1e3,"x":[2.5,{"b":1,"a":2}]}'
    out = force_cni_version("/d/00-mycni.conf", data, "1.1.1")
    assert out == (
        b'{"big":1000,"cniVersion":"1.1.1","mtu":1500,"type":"mycni","x":[2.5,{"a":2,"b":1}]}'
    )
    assert json.loads(out)["cniVersion"] == "1.1.1"


def test_force_cni_version_errors() -> None:
    with pytest.raises(PrimaryConfigError) as info:
        force_cni_version("10.conf", b"[]", "1.0.0")
    assert str(info.value) == (
        "failed to unmarshall cni config 10.conf: "
        "json: cannot unmarshal array into Go value of type map[string]interface {}"
    )


async def test_read_primary_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "10-flannel.conflist"
    path.write_text(json.dumps(FLANNEL_CONFLIST))
    primary = await read_primary(str(path), "0.3.1")
    assert primary.path == str(path)
    assert primary.data == FLANNEL_CONFLIST
    assert os.fspath(path) in repr(primary)
