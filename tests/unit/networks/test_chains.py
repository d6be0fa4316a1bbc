"""Sub-directory plugins and the auxiliary CNI chain (upstream HEAD: ``loadSubdirectoryChain``,
``LoadChainedDelegatesFromBytes``, ``CmdAdd``'s ``auxiliaryCNIChainName`` step), on real files:
the name rule, the order, what is skipped with a log, the non-path error, the bytes."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from cni_shim.errors import INVALID_NETWORK_CONFIG, IO_FAILURE, CNIError
from multusd.cni.conf import conflist_from_bytes
from multusd.commands.delete import most_delegates
from multusd.config.schema import decode
from multusd.networks.chains import (
    auxiliary_chain,
    chain_delegate,
    compact,
    go_dir,
    lossless_raw,
    subdirectory_chain,
)
from multusd.networks.netconf import NetConf
from multusd.networks.ondisk import find_by_name, load_conflist_file
from multusd.networks.resolve import delegates_for

LABEL = "default/pod1/uid-1"
LOGGER = "multusd.networks.chains"
TUNING = {"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}}


def write(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(obj if isinstance(obj, bytes) else json.dumps(obj).encode())
    return path


def netconf(tmp_path: Path, **fields: Any) -> NetConf:
    cluster = write(tmp_path / "10-net.conf", {"cniVersion": "1.0.0", "name": "net", "type": "ptp"})
    keys = {"cniVersion": "1.0.0", "clusterNetwork": str(cluster), "auxiliaryCNIChainName": "aux"}
    return decode(NetConf, {**keys, **fields})


async def chain_of(conf: NetConf) -> list[str]:
    delegate = await auxiliary_chain(conf, LABEL)
    assert delegate is not None
    return [p["type"] for p in delegate.plugins]


# --- the auxiliary chain ----------------------------------------------------------------------


async def test_aux_chain_is_passthru_then_the_conf_files_by_name(tmp_path: Path) -> None:
    write(tmp_path / "aux" / "20-b.conf", {**TUNING, "name": "b"})
    write(tmp_path / "aux" / "10-a.conf", {"type": "portmap", "name": "a"})
    write(tmp_path / "aux" / ".conf", {"type": "hidden"})  # Go's filepath.Ext: ".conf"
    write(tmp_path / "aux" / "05-ignored.json", {"type": "ignored"})
    write(tmp_path / "aux" / "06-ignored.conflist", {"type": "ignored"})
    write(tmp_path / "aux" / "07-dir.conf" / "inner.conf", {"type": "ignored"})
    write(tmp_path / "aux" / "08-noext", {"type": "ignored"})
    conf = netconf(tmp_path)
    delegate = await auxiliary_chain(conf, LABEL)
    assert delegate is not None
    assert [p["type"] for p in delegate.plugins] == ["passthru", "hidden", "portmap", "tuning"]
    assert delegate.name == delegate.network_name == "aux"
    assert delegate.is_conflist and not delegate.master
    assert delegate.conf == {"cniVersion": "1.0.0", "name": "aux"}
    assert delegate.plugins[0] == {"name": "passthru-cni", "type": "passthru"}


async def test_aux_chain_version_is_multus_cni_version(tmp_path: Path) -> None:
    write(tmp_path / "aux" / "a.conf", TUNING)
    delegate = await auxiliary_chain(netconf(tmp_path, cniVersion="0.4.0"), LABEL)
    assert delegate is not None and delegate.cni_version == "0.4.0"


async def test_aux_chain_bytes_keep_each_file_as_written(tmp_path: Path) -> None:
    """HEAD's lossless bytes: list keys and plugins sorted as a Go map marshals, each file's
    bytes compacted as a ``json.RawMessage`` (its key order, number spellings, escapes kept;
    ``<``/``>``/``&`` escaped)."""
    write(tmp_path / "aux" / "a.conf", b'{ "type": "tuning",\n  "z": 1.50, "a": "<\\u00e9>" }\n')
    delegate = await auxiliary_chain(netconf(tmp_path), LABEL)
    assert delegate is not None
    assert delegate.raw == (
        b'{"cniVersion":"1.0.0","name":"aux","plugins":[{"name":"passthru-cni","type":"passthru"},'
        b'{"type":"tuning","z":1.50,"a":"\\u003c\\u00e9\\u003e"}]}'
    )


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param({}, id="no-directory"),
        pytest.param({"aux/": None}, id="empty-directory"),
        pytest.param({"aux/a.json": TUNING, "aux/b.conflist": TUNING}, id="no-conf-file"),
    ],
)
async def test_only_passthru_means_no_extra_delegate(
    tmp_path: Path, layout: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    for name, obj in layout.items():
        if obj is None:
            (tmp_path / name).mkdir(parents=True)
        else:
            write(tmp_path / name, obj)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert await auxiliary_chain(netconf(tmp_path), LABEL) is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "Using AuxiliaryCNIChainName: aux" in caplog.text


async def test_no_chain_name_no_chain(tmp_path: Path) -> None:
    write(tmp_path / "aux" / "a.conf", TUNING)
    assert await auxiliary_chain(netconf(tmp_path, auxiliaryCNIChainName=""), LABEL) is None


@pytest.mark.parametrize(
    ("files", "logged"),
    [
        pytest.param(
            {"a.conf": {"name": "untyped"}},
            "error loading plugin configs: error parsing configuration: missing 'type'",
            id="no-type",
        ),
        pytest.param(
            {"a.conf": TUNING, "b.conf": b"{"},
            "error loading plugin configs: error parsing configuration: "
            "unexpected end of JSON input",
            id="broken-json-after-a-good-one",
        ),
        pytest.param(
            {"a.conf": {"type": 5}},
            "error loading plugin configs: error parsing configuration: json: cannot "
            "unmarshal number into Go struct field PluginConf.type of type string",
            id="type-not-a-string",
        ),
    ],
)
async def test_a_file_that_cannot_load_skips_the_chain_with_a_log(
    tmp_path: Path, files: dict[str, Any], logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    for name, obj in files.items():
        write(tmp_path / "aux" / name, obj)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert await auxiliary_chain(netconf(tmp_path), LABEL) is None
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == f"LoadChainedDelegatesFromBytes: {logged}"


async def test_a_chain_directory_that_is_a_file_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "aux", b"not a directory")
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert await auxiliary_chain(netconf(tmp_path), LABEL) is None
    assert caplog.records[0].getMessage() == (
        "LoadChainedDelegatesFromBytes: error loading plugin configs: failed to read plugin "
        f"config files in {tmp_path}/aux: open {tmp_path}/aux: not a directory"
    )


@pytest.mark.parametrize("name", ["-aux", ".aux", "_aux", "a/b", "a b", "ä", "a:b"], ids=repr)
async def test_a_chain_name_that_cannot_name_a_directory_is_logged(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "a" / "b.conf", TUNING)  # what "a/b" would reach
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert await auxiliary_chain(netconf(tmp_path, auxiliaryCNIChainName=name), LABEL) is None
    assert caplog.records[0].getMessage() == (
        f"LoadChainedDelegatesFromBytes: invalid network config name: {name}"
    )


@pytest.mark.parametrize("name", ["a", "0", "aux-1.chain_2", "A.B"])
async def test_chain_names_the_spec_allows(tmp_path: Path, name: str) -> None:
    write(tmp_path / name / "a.conf", TUNING)
    assert await chain_of(netconf(tmp_path, auxiliaryCNIChainName=name)) == ["passthru", "tuning"]


async def test_a_name_that_breaks_the_json_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream builds the list with ``%s``: a quote in the name makes it invalid JSON."""
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert await auxiliary_chain(netconf(tmp_path, auxiliaryCNIChainName='a"b'), LABEL) is None
    assert caplog.records[0].getMessage() == (
        "LoadChainedDelegatesFromBytes: error loading network config from bytes: error parsing "
        "configuration list: invalid character 'b' after object key:value pair"
    )


@pytest.mark.parametrize("cluster", ["", "k8s-pod-network", "kube-system-net"])
async def test_cluster_network_not_a_path_fails_the_add(tmp_path: Path, cluster: str) -> None:
    conf = netconf(tmp_path, clusterNetwork=cluster, delegates=[{"type": "ptp", "name": "p"}])
    with pytest.raises(CNIError) as info:
        await auxiliary_chain(conf, LABEL)
    assert info.value.code == INVALID_NETWORK_CONFIG
    assert info.value.msg == (
        f"Multus: [{LABEL}]: auxiliary chain used but ClusterNetwork must be a path, and it is "
        f"not a path: {cluster}"
    )


async def test_the_directory_is_beside_the_cluster_network_path(tmp_path: Path) -> None:
    """``filepath.Dir(clusterNetwork)``: a file or a directory path alike, cleaned."""
    write(tmp_path / "aux" / "a.conf", TUNING)
    write(tmp_path / "sub" / "aux" / "a.conf", {"type": "other"})
    by_dir = netconf(tmp_path, clusterNetwork=f"{tmp_path}//sub")
    assert await chain_of(by_dir) == ["passthru", "tuning"]
    by_file = netconf(tmp_path, clusterNetwork=f"{tmp_path}/sub/x.conflist")
    assert await chain_of(by_file) == ["passthru", "other"]


def test_go_dir() -> None:
    assert go_dir("/etc/cni/net.d/10-x.conf") == "/etc/cni/net.d"
    assert go_dir("/etc/cni/net.d/") == "/etc/cni/net.d"
    assert go_dir("//a//b/../c/x") == "/a/c"
    assert go_dir("x.conf") == "."
    assert go_dir("/x") == "/"


async def test_the_chain_comes_last_in_an_add(tmp_path: Path) -> None:
    write(tmp_path / "aux" / "a.conf", TUNING)
    delegates = await delegates_for("ADD", netconf(tmp_path), None, None, pod_label=LABEL)
    assert [d.name for d in delegates] == ["net", "aux"]
    assert delegates[0].master and not delegates[1].master


async def test_del_and_check_never_build_the_chain(tmp_path: Path) -> None:
    """Upstream adds it in CmdAdd only: a DEL finds it in the delegate cache."""
    write(tmp_path / "aux" / "a.conf", TUNING)
    conf = netconf(tmp_path)
    assert [d.name for d in await delegates_for("DEL", conf, None, None)] == ["net"]
    assert await delegates_for("CHECK", conf, None, None) == []


def test_a_del_may_run_the_chain_an_add_cached(tmp_path: Path) -> None:
    with_chain = netconf(tmp_path, maxNetworksPerPod=3)
    assert most_delegates(with_chain) == 1 + 3 + 1
    assert most_delegates(netconf(tmp_path, maxNetworksPerPod=3, auxiliaryCNIChainName="")) == 4


# --- a .conflist cluster network: the same sub-directory loading ------------------------------


async def test_conflist_path_gets_its_subdirectory_plugins(tmp_path: Path) -> None:
    path = write(
        tmp_path / "10-net.conflist",
        {"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "bridge", "bridge": "b0"}]},
    )
    write(tmp_path / "net" / "20-tuning.conf", TUNING)
    write(tmp_path / "net" / "10-portmap.conf", {"type": "portmap"})
    delegate = await load_conflist_file(path)
    assert [p["type"] for p in delegate.plugins] == ["bridge", "portmap", "tuning"]
    assert delegate.raw == (
        b'{"cniVersion":"1.0.0","name":"net","plugins":[{"bridge":"b0","type":"bridge"},'
        b'{"type":"portmap"},{"type":"tuning","sysctl":{"net.ipv4.conf.eth0.arp_notify":"1"}}]}'
    )


async def test_load_only_inlined_plugins_skips_the_subdirectory(tmp_path: Path) -> None:
    path = write(
        tmp_path / "n.conflist",
        {"name": "bad name", "loadOnlyInlinedPlugins": True, "plugins": [{"type": "bridge"}]},
    )
    write(tmp_path / "bad name" / "a.conf", TUNING)
    assert [p["type"] for p in (await load_conflist_file(path)).plugins] == ["bridge"]


@pytest.mark.parametrize("name", ["bad name", "net\n", ""], ids=repr)
async def test_conflist_path_whose_name_cannot_name_a_directory_fails(
    tmp_path: Path, name: str
) -> None:
    """Go's ``$`` is the end of the text: a trailing newline does not pass either."""
    path = write(tmp_path / "n.conflist", {"name": name, "plugins": [{"type": "bridge"}]})
    with pytest.raises(CNIError) as info:
        await load_conflist_file(path)
    assert info.value.code == INVALID_NETWORK_CONFIG
    assert info.value.msg == (
        f"error loading CNI conflist file {path}: invalid network config name: {name}"
    )


async def test_conflist_path_with_a_broken_subdirectory_plugin_fails(tmp_path: Path) -> None:
    path = write(tmp_path / "n.conflist", {"name": "n", "plugins": [{"type": "bridge"}]})
    write(tmp_path / "n" / "a.conf", {"name": "no type"})
    with pytest.raises(CNIError) as info:
        await load_conflist_file(path)
    assert info.value.code == INVALID_NETWORK_CONFIG
    assert info.value.msg == (
        f"error loading CNI conflist file {path}: error loading plugin configs: "
        "error parsing configuration: missing 'type'"
    )


async def test_conflist_path_unreadable_subdirectory_plugin_is_an_io_error(tmp_path: Path) -> None:
    path = write(tmp_path / "n.conflist", {"name": "n", "plugins": [{"type": "bridge"}]})
    (tmp_path / "n" / "a.conf").mkdir(parents=True)  # a directory: not listed
    (tmp_path / "n" / "b.conf").symlink_to(tmp_path / "gone.conf")
    with pytest.raises(CNIError) as info:
        await load_conflist_file(path)
    assert info.value.code == IO_FAILURE
    gone = tmp_path / "n" / "b.conf"
    assert info.value.msg == (
        f"error loading CNI conflist file {path}: error loading plugin configs: "
        f"error reading {gone}: open {gone}: no such file or directory"
    )


async def test_by_name_lookup_keeps_the_file_bytes(tmp_path: Path) -> None:
    """A network found by name in ``confDir`` is upstream's ``GetCNIConfigFromFile``: the
    list's own bytes (its sub-directory is read, and must load, but is not added)."""
    raw = json.dumps({"name": "net", "plugins": [{"type": "bridge"}]}, indent=1).encode()
    write(tmp_path / "10-net.conflist", raw)
    write(tmp_path / "net" / "a.conf", TUNING)
    found = await find_by_name(tmp_path, "net")
    assert found is not None and found.raw == raw
    assert [p["type"] for p in found.plugins] == ["bridge"]
    write(tmp_path / "net" / "b.conf", {"name": "no type"})
    with pytest.raises(CNIError, match="error parsing configuration: missing 'type'"):
        await find_by_name(tmp_path, "net")


# --- the bytes --------------------------------------------------------------------------------


def test_compact_is_go_raw_message() -> None:
    raw = b' {\n "b" : [1.0, 2e3 ,{"x y":"<&>\xe2\x80\xa8"}],\t"a":"\\"q\\" \\u0041"} '
    assert compact(raw) == (
        b'{"b":[1.0,2e3,{"x y":"\\u003c\\u0026\\u003e\\u2028"}],"a":"\\"q\\" \\u0041"}'
    )


def test_lossless_raw_sorts_list_keys_last_duplicate_wins() -> None:
    conflist = conflist_from_bytes(
        b'{"zz": {"k": [1, {"}": "]"}]}, "name": "n", "name": "m",\n'
        b'"plugins": [{"type": "t", "b": 1, "a": 2}], "cniVersion": "1.1.0", "aa": 1.0}'
    )
    assert lossless_raw(conflist) == (
        b'{"aa":1.0,"cniVersion":"1.1.0","name":"m","plugins":[{"a":2,"b":1,"type":"t"}],'
        b'"zz":{"k":[1,{"}":"]"}]}}'
    )


async def test_chain_delegate_of_a_list(tmp_path: Path) -> None:
    conflist = await subdirectory_chain(b'{"name":"n","plugins":[{"type":"t"}]}', "")
    delegate = chain_delegate(conflist)
    assert delegate.raw == b'{"name":"n","plugins":[{"type":"t"}]}'
    assert (delegate.name, delegate.conf, delegate.plugins) == (
        "n",
        {"name": "n"},
        ({"type": "t"},),
    )
