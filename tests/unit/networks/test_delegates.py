"""Delegates from config bytes and from disk (docs/upstream.md, "Cluster and default networks"
and "Delegates from config bytes"), on real files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cni_shim.errors import INVALID_NETWORK_CONFIG, IO_FAILURE, CNIError
from multusd.networks.delegates import delegate_from_bytes
from multusd.networks.ondisk import (
    find_by_name,
    load_conf_file,
    load_conflist_file,
    load_path,
    resolve_on_disk,
)

LIST_PREFIX = "LoadDelegateNetConf: failed with: LoadDelegateNetConfList: "

BRIDGE = {"cniVersion": "0.3.1", "name": "br", "type": "bridge", "bridge": "cni0"}
CONFLIST = {
    "name": "cbr0",
    "cniVersion": "0.3.1",
    "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": True}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}


def write(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(obj if isinstance(obj, bytes) else json.dumps(obj).encode())
    return path


def invalid(call: Any, *args: Any) -> str:
    with pytest.raises(CNIError) as info:
        call(*args)
    assert info.value.code == INVALID_NETWORK_CONFIG
    return info.value.msg


async def invalid_async(call: Any, *args: Any) -> str:
    with pytest.raises(CNIError) as info:
        await call(*args)
    assert info.value.code == INVALID_NETWORK_CONFIG
    return info.value.msg


# --- delegate_from_bytes --------------------------------------------------------------------


def test_single_plugin_keeps_bytes() -> None:
    data = b'{"type": "bridge", "name": "br",  "x": 1}'
    delegate = delegate_from_bytes(data)
    assert delegate.raw == data
    assert delegate.name == delegate.network_name == "br"
    assert delegate.plugin_type == "bridge"
    assert not delegate.is_conflist
    assert not delegate.master
    assert delegate.as_master().master


def test_conflist_from_bytes() -> None:
    data = json.dumps(CONFLIST).encode()
    delegate = delegate_from_bytes(data)
    assert delegate.raw == data
    assert delegate.is_conflist
    assert delegate.name == "cbr0"
    assert delegate.conf == {"name": "cbr0", "cniVersion": "0.3.1"}
    assert delegate.cni_version == "0.3.1"
    assert delegate.plugin_type == ""
    assert [p["type"] for p in delegate.plugins] == ["flannel", "portmap"]


@pytest.mark.parametrize("obj", [{"name": "x"}, {"name": "x", "plugins": None}, {"type": ""}])
def test_conflist_without_plugins(obj: dict[str, Any]) -> None:
    assert invalid(delegate_from_bytes, json.dumps(obj).encode()) == (
        LIST_PREFIX + "delegate must have the 'type' or 'plugin' field"
    )


def test_empty_plugin_list_is_a_clear_error() -> None:
    assert invalid(delegate_from_bytes, b'{"name": "x", "plugins": []}') == (
        LIST_PREFIX + "delegate must have at least one plugin"
    )


@pytest.mark.parametrize(
    "plugins", [[{"name": "a"}], [{"type": ""}, {"type": "bridge"}], ["bridge"]]
)
def test_first_plugin_without_type(plugins: list[Any]) -> None:
    data = json.dumps({"name": "x", "plugins": plugins}).encode()
    assert invalid(delegate_from_bytes, data) == (
        LIST_PREFIX + "a plugin delegate must have the 'type' field"
    )


@pytest.mark.parametrize("data", [b"{", b"[]", b"\xff"])
def test_not_an_object(data: bytes) -> None:
    msg = invalid(delegate_from_bytes, data)
    assert msg.startswith("LoadDelegateNetConf: error unmarshalling delegate config: ")


# --- load_conflist_file ---------------------------------------------------------------------


async def test_conflist_file_rebuilt_losslessly(tmp_path: Path) -> None:
    source = {
        "plugins": [
            {"type": "calico", "kubernetes": {"kubeconfig": "/k"}, "ipam": {"type": "calico-ipam"}},
            {"type": "portmap", "snat": True},
        ],
        "name": "k8s-pod-network",
        "cniVersion": "0.3.1",
        "zzz": 1,
    }
    path = write(tmp_path / "10-calico.conflist", source)
    delegate = await load_conflist_file(path)
    expected = {
        "cniVersion": "0.3.1",
        "name": "k8s-pod-network",
        "plugins": source["plugins"],
        "zzz": 1,
    }
    assert json.loads(delegate.raw) == expected
    assert list(json.loads(delegate.raw)) == ["cniVersion", "name", "plugins", "zzz"]
    assert b" " not in delegate.raw
    assert delegate.plugins[0]["kubernetes"] == {"kubeconfig": "/k"}
    assert delegate.conf == {"cniVersion": "0.3.1", "name": "k8s-pod-network", "zzz": 1}
    assert delegate.name == "k8s-pod-network"
    assert delegate.is_conflist


async def test_conflist_file_subdirectory_plugins(tmp_path: Path) -> None:
    path = write(tmp_path / "net.conflist", {"name": "chain", "plugins": [{"type": "bridge"}]})
    write(tmp_path / "chain" / "20-b.conf", {"type": "tuning"})
    write(tmp_path / "chain" / "10-a.conf", {"type": "portmap"})
    write(tmp_path / "chain" / "05-ignored.json", {"type": "ignored"})
    delegate = await load_conflist_file(path)
    assert [p["type"] for p in delegate.plugins] == ["bridge", "portmap", "tuning"]
    assert [p["type"] for p in json.loads(delegate.raw)["plugins"]] == [
        "bridge",
        "portmap",
        "tuning",
    ]


async def test_conflist_file_only_subdirectory_plugins(tmp_path: Path) -> None:
    path = write(tmp_path / "net.conflist", {"name": "chain"})
    write(tmp_path / "chain" / "a.conf", {"type": "bridge"})
    assert [p["type"] for p in (await load_conflist_file(path)).plugins] == ["bridge"]


async def test_conflist_file_errors(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.conflist", {"name": "none"})
    assert await invalid_async(load_conflist_file, empty) == (
        f"error loading CNI conflist file {empty}: no plugin configs found"
    )
    untyped = write(tmp_path / "untyped.conflist", {"name": "u", "plugins": [{"x": 1}]})
    assert await invalid_async(load_conflist_file, untyped) == (
        f"error loading CNI conflist file {untyped}: error loading network config from bytes: "
        "failed to parse plugin config 0: error parsing configuration: missing 'type'"
    )
    directory = tmp_path / "dir.conflist"
    directory.mkdir()
    assert await invalid_async(load_conflist_file, directory) == (
        f"error loading CNI conflist file {directory}: CNI configuration path is not a regular file"
    )
    broken = write(tmp_path / "broken.conflist", b"{")
    assert (await invalid_async(load_conflist_file, broken)).startswith(
        f"error loading CNI conflist file {broken}"
    )


# --- load_conf_file / load_path -------------------------------------------------------------


async def test_conf_file(tmp_path: Path) -> None:
    path = write(tmp_path / "br.conf", BRIDGE)
    delegate = await load_conf_file(path)
    assert delegate.raw == path.read_bytes()
    assert delegate.name == "br"


async def test_conf_file_missing_type(tmp_path: Path) -> None:
    path = write(tmp_path / "x.conf", {"name": "x"})
    assert await invalid_async(load_conf_file, path) == (
        f"error loading CNI config file {path}: error parsing configuration: missing 'type'"
    )


async def test_load_path_directory_takes_first_by_name(tmp_path: Path) -> None:
    write(tmp_path / "20-b.conf", {**BRIDGE, "name": "b"})
    write(tmp_path / "10-a.conflist", {**CONFLIST, "name": "a"})
    write(tmp_path / "05-ignored.txt", b"junk")
    assert (await load_path(tmp_path)).name == "a"


async def test_load_path_directory_without_conf_files(tmp_path: Path) -> None:
    write(tmp_path / "a.json", BRIDGE)
    assert (
        await invalid_async(load_path, tmp_path)
        == f"getNetDelegate: cannot find network: {tmp_path}"
    )


async def test_load_path_files(tmp_path: Path) -> None:
    assert (await load_path(write(tmp_path / "a.conflist", CONFLIST))).is_conflist
    assert (await load_path(write(tmp_path / "b.conf", BRIDGE))).name == "br"
    assert (await load_path(write(tmp_path / "c.json", BRIDGE))).name == "br"


# --- find_by_name / resolve_on_disk ---------------------------------------------------------


async def test_find_by_name_sorted_first_match(tmp_path: Path) -> None:
    write(tmp_path / "30-late.conf", {**BRIDGE, "name": "net", "bridge": "late"})
    write(tmp_path / "10-early.conf", {**BRIDGE, "name": "net", "bridge": "early"})
    write(tmp_path / "20-list.conflist", {**CONFLIST, "name": "list"})
    write(tmp_path / "00-other.json", {**BRIDGE, "name": "other"})
    found = await find_by_name(tmp_path, "net")
    assert found is not None
    assert found.conf["bridge"] == "early"
    listed = await find_by_name(tmp_path, "list")
    assert listed is not None and listed.is_conflist
    assert await find_by_name(tmp_path, "absent") is None
    assert await find_by_name(tmp_path / "missing", "net") is None


async def test_find_by_name_ignores_subdirectories(tmp_path: Path) -> None:
    write(tmp_path / "sub" / "a.conf", {**BRIDGE, "name": "net"})
    assert await find_by_name(tmp_path, "net") is None


async def test_find_by_name_aborts_on_bad_file_before_match(tmp_path: Path) -> None:
    write(tmp_path / "00-bad.conf", {"name": "no-type"})
    write(tmp_path / "10-good.conf", {**BRIDGE, "name": "net"})
    with pytest.raises(CNIError):
        await find_by_name(tmp_path, "net")


async def test_resolve_by_name(tmp_path: Path) -> None:
    write(tmp_path / "a.conf", BRIDGE)
    assert (await resolve_on_disk("br", str(tmp_path))).name == "br"
    assert await invalid_async(resolve_on_disk, "nope", str(tmp_path)) == (
        "getNetDelegate: cannot find network: nope"
    )


async def test_resolve_by_path_ignores_conf_dir(tmp_path: Path) -> None:
    path = write(tmp_path / "x" / "a.conflist", CONFLIST)
    assert (await resolve_on_disk(str(path), "/nonexistent")).name == "cbr0"
    assert (await resolve_on_disk(str(path.parent), "/nonexistent")).name == "cbr0"


async def test_resolve_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "gone.conf"
    with pytest.raises(CNIError) as info:
        await resolve_on_disk(str(missing), str(tmp_path))
    assert info.value.code == IO_FAILURE == 5
    assert info.value.msg == f"{os.strerror(2)}: {missing}"


def test_cni_args_merged_into_args_cni_of_every_plugin() -> None:
    from multusd.networks.delegates import with_cni_args

    single = delegate_from_bytes(
        b'{"type":"macvlan","name":"m","args":{"cni":{"a":1,"b":2},"k":3}}'
    )
    merged = with_cni_args(single, {"b": 20, "c": 30})
    assert json.loads(merged.raw) == {
        "args": {"cni": {"a": 1, "b": 20, "c": 30}, "k": 3},
        "name": "m",
        "type": "macvlan",
    }
    assert list(json.loads(merged.raw)) == ["args", "name", "type"]  # re-encoded sorted
    listed = delegate_from_bytes(b'{"name":"l","plugins":[{"type":"a"},{"type":"b","args":5}]}')
    plugins = json.loads(with_cni_args(listed, {"x": "y"}).raw)["plugins"]
    assert [p["args"] for p in plugins] == [{"cni": {"x": "y"}}, {"cni": {"x": "y"}}]
