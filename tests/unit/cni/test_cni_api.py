"""libcni semantics of the engine, observed through recording fake plugins (real executables)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cni_shim import errors, results
from cni_shim.errors import CNIError
from multusd.cni import cache, conf
from multusd.cni.api import CNI, GCAttachment, RuntimeConf
from multusd.cni.invoke import LibcniError, SubprocessExecutor

MakePlugin = Callable[[str, str], str]  # the conftest fixture

# Records every call to RECORD_DIR/<n>.json, answers ADD with a result in the config's version
# (its address depends on the plugin name), and fails on demand with FAIL_<TYPE>=<code>.
RECORDER = """
import json, os, sys
name = os.path.basename(sys.argv[0])
raw = sys.stdin.buffer.read()
record_dir = os.environ["RECORD_DIR"]
seq = len(os.listdir(record_dir))
with open(os.path.join(record_dir, "%03d.json" % seq), "w") as f:
    json.dump({"type": name, "stdin": raw.decode(), "env": dict(os.environ)}, f)
fail = os.environ.get("FAIL_" + name.upper())
if fail:
    print(json.dumps({"code": int(fail), "msg": name + " refuses", "details": "d"}))
    sys.exit(1)
if os.environ["CNI_COMMAND"] == "ADD":
    version = json.loads(raw).get("cniVersion", "")
    ip = {"address": "10.1.0.%d/24" % len(name)}
    if version.startswith("0."):
        ip["version"] = "4"
    result = {"cniVersion": version, "ips": [ip]}
    if os.environ.get("OMIT_VERSION"):
        del result["cniVersion"]
    print(json.dumps(result))
"""


class Rig:
    def __init__(self, tmp_path: Path, bin_dir: Path, make_plugin: MakePlugin) -> None:
        for name in ("first", "second", "third"):
            make_plugin(name, RECORDER)
        self.records = tmp_path / "records"
        self.records.mkdir()
        self.cache_dir = tmp_path / "cache"
        self.bin_dir = bin_dir
        self.environ = {
            "PATH": "/usr/bin:/bin",
            "RECORD_DIR": str(self.records),
            "CNI_COMMAND": "BOGUS",  # inherited values lose to the CNI ones
            "DAEMON_VAR": "kept",
        }
        self.paths = ["/nonexistent", str(bin_dir)]

    def engine(self, **extra_env: str) -> CNI:
        return CNI(
            self.paths,
            SubprocessExecutor(),
            str(self.cache_dir),
            exec_timeout=30,
            environ={**self.environ, **extra_env},
        )

    def calls(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.records.iterdir()):
            record = json.loads(path.read_text())
            record["conf"] = json.loads(record["stdin"]) if record["stdin"] else None
            out.append(record)
            path.unlink()
        return out

    def cache_file(self, network: str = "net", container: str = "ctr1") -> Path:
        return self.cache_dir / "results" / f"{network}-{container}-eth0"


@pytest.fixture
def rig(tmp_path: Path, bin_dir: Path, make_plugin: MakePlugin) -> Rig:
    return Rig(tmp_path, bin_dir, make_plugin)


RT = RuntimeConf(
    container_id="ctr1",
    netns="/var/run/netns/x",
    ifname="eth0",
    args=(("IgnoreUnknown", "true"), ("K8S_POD_NAME", "p"), ("K8S_POD_UID", "")),
    capability_args={"portMappings": [{"hostPort": 1}], "mac": "c2:00:00:00:00:01"},
)


def _list(version: str, **extra: Any) -> conf.NetworkConfigList:
    body = {
        "cniVersion": version,
        "name": "net",
        "plugins": [
            {"type": "first", "name": "own", "capabilities": {"mac": True, "ips": True}},
            {"type": "second", "capabilities": {"portMappings": True, "mac": False}},
        ],
        **extra,
    }
    return conf.conflist_from_bytes(json.dumps(body).encode())


async def test_add_list_chains_and_injects(rig: Rig) -> None:
    conflist = _list("1.0.0")
    result = await rig.engine().add_network_list(conflist, RT)
    assert results.to_wire(result) == {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.6/24"}]}

    first, second = rig.calls()
    assert (first["type"], second["type"]) == ("first", "second")
    assert first["conf"]["name"] == second["conf"]["name"] == "net"
    assert first["conf"]["runtimeConfig"] == {"mac": "c2:00:00:00:00:01"}
    assert "prevResult" not in first["conf"]
    assert second["conf"]["runtimeConfig"] == {"portMappings": [{"hostPort": 1}]}
    assert second["conf"]["prevResult"] == {
        "cniVersion": "1.0.0",
        "ips": [{"address": "10.1.0.5/24"}],
    }
    assert list(json.loads(first["stdin"])) == sorted(json.loads(first["stdin"]))  # sorted keys

    env = first["env"]
    assert env["CNI_COMMAND"] == "ADD"
    assert env["CNI_CONTAINERID"] == "ctr1"
    assert env["CNI_NETNS"] == "/var/run/netns/x"
    assert env["CNI_IFNAME"] == "eth0"
    assert env["CNI_ARGS"] == "IgnoreUnknown=true;K8S_POD_NAME=p;K8S_POD_UID="
    assert env["CNI_PATH"] == f"/nonexistent:{rig.bin_dir}"
    assert env["DAEMON_VAR"] == "kept"

    cached = json.loads(rig.cache_file().read_bytes())
    assert list(cached) == [
        "kind",
        "containerId",
        "config",
        "ifName",
        "networkName",
        "netns",
        "cniArgs",
        "capabilityArgs",
        "result",
    ]
    assert base64.b64decode(cached["config"]) == conflist.raw
    assert cached["cniArgs"] == [
        ["IgnoreUnknown", "true"],
        ["K8S_POD_NAME", "p"],
        ["K8S_POD_UID", ""],
    ]
    assert cached["result"] == {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.6/24"}]}


async def test_check_and_del_use_the_cached_result(rig: Rig) -> None:
    conflist = _list("0.4.0")
    engine = rig.engine()
    await engine.add_network_list(conflist, RT)
    rig.calls()

    await engine.check_network_list(conflist, RT)
    checks = rig.calls()
    assert [c["type"] for c in checks] == ["first", "second"]
    assert {c["env"]["CNI_COMMAND"] for c in checks} == {"CHECK"}
    prev = checks[0]["conf"]["prevResult"]
    assert prev["cniVersion"] == "0.4.0"
    assert prev["ips"][0]["address"] == "10.1.0.6/24"

    await engine.del_network_list(conflist, RT)
    deletes = rig.calls()
    assert [c["type"] for c in deletes] == ["second", "first"]  # reverse order
    assert all(c["conf"]["prevResult"] == prev for c in deletes)
    assert not rig.cache_file().exists()


async def test_old_versions_have_no_check_and_no_prev_result(rig: Rig) -> None:
    conflist = _list("0.3.1")
    engine = rig.engine()
    await engine.add_network_list(conflist, RT)
    rig.calls()
    with pytest.raises(LibcniError) as info:
        await engine.check_network_list(conflist, RT)
    assert (info.value.code, info.value.msg) == (
        errors.INCOMPATIBLE_VERSION,
        'configuration version "0.3.1" does not support the CHECK command',
    )
    await engine.del_network_list(conflist, RT)
    assert all("prevResult" not in c["conf"] for c in rig.calls())


async def test_disable_check_skips_plugins(rig: Rig) -> None:
    await rig.engine().check_network_list(_list("1.0.0", disableCheck=True), RT)
    assert rig.calls() == []


async def test_corrupt_cache_list_del_proceeds_single_del_fails(rig: Rig) -> None:
    engine = rig.engine()
    rig.cache_file().parent.mkdir(parents=True)
    rig.cache_file().write_text("{corrupt")
    await engine.del_network_list(_list("1.0.0"), RT)
    assert all("prevResult" not in c["conf"] for c in rig.calls())
    assert not rig.cache_file().exists()

    single = conf.conf_from_bytes(b'{"cniVersion":"1.0.0","name":"net","type":"first"}')
    rig.cache_file().write_text("{corrupt")
    with pytest.raises(CNIError) as info:
        await engine.del_network(single, RT)
    assert info.value.msg.startswith('failed to get network "net" cached result: ')
    assert rig.calls() == []


async def test_single_plugin_roundtrip_and_version_fixup(rig: Rig) -> None:
    single = conf.conf_from_bytes(b'{"cniVersion":"0.3.1","name":"net","type":"third"}')
    engine = rig.engine(OMIT_VERSION="1")
    result = await engine.add_network(single, RT)
    assert result["cniVersion"] == "0.3.1"  # taken from the config
    (call,) = rig.calls()
    assert "runtimeConfig" not in call["conf"]  # no capabilities declared
    await engine.del_network(single, RT)
    (call,) = rig.calls()
    assert call["env"]["CNI_COMMAND"] == "DEL"
    assert not rig.cache_file().exists()


async def test_add_validates_before_exec(rig: Rig) -> None:
    engine = rig.engine()
    with pytest.raises(CNIError) as info:
        await engine.add_network_list(
            _list("1.0.0"), RuntimeConf(container_id="bad id", ifname="eth0")
        )
    assert (info.value.code, info.value.msg, info.value.details) == (
        errors.INVALID_ENVIRONMENT,
        'plugin type="first" name="own" failed (add): invalid characters in containerID',
        "bad id",
    )
    with pytest.raises(CNIError, match="interface name is too long"):
        await engine.add_network_list(
            _list("1.0.0"), RuntimeConf(container_id="c", ifname="x" * 16)
        )
    assert rig.calls() == []


async def test_plugin_errors_are_prefixed_with_code_kept(rig: Rig) -> None:
    engine = rig.engine(FAIL_SECOND="123")
    with pytest.raises(CNIError) as info:
        await engine.add_network_list(_list("1.0.0"), RT)
    assert not isinstance(info.value, LibcniError)  # a CNI error object, as upstream
    assert info.value == CNIError(123, 'plugin type="second" failed (add): second refuses', "d")
    assert not rig.cache_file().exists()

    with pytest.raises(CNIError) as info:
        await engine.del_network_list(_list("1.0.0"), RT)
    assert info.value.msg == 'plugin type="second" failed (delete): second refuses'


async def test_missing_plugin(rig: Rig) -> None:
    missing = conf.conflist_from_bytes(
        b'{"name":"net","cniVersion":"1.0.0","plugins":[{"type":"nope"}]}'
    )
    with pytest.raises(LibcniError) as info:
        await rig.engine().add_network_list(missing, RT)
    assert info.value.msg == (
        f'plugin type="nope" failed (add): failed to find plugin "nope" in path '
        f"[/nonexistent {rig.bin_dir}]"
    )


async def _seed(rig: Rig, network: str, container: str) -> None:
    entry = cache.CacheEntry(
        container_id=container,
        network_name=network,
        ifname="eth0",
        config=b"{}",
        netns="/var/run/netns/" + container,
        cni_args=(("K", "v"),),
        result={"cniVersion": "1.1.0", "ips": [{"address": "10.1.0.9/24"}]},
    )
    await cache.write_entry(str(rig.cache_dir), entry)


async def test_gc_deletes_stale_then_gcs_plugins(rig: Rig) -> None:
    await _seed(rig, "net", "valid")
    await _seed(rig, "net", "stale")
    await _seed(rig, "other", "stale")
    await rig.engine().gc_network_list(_list("1.1.0"), [GCAttachment("valid", "eth0")])
    calls = rig.calls()
    deletes = [c for c in calls if c["env"]["CNI_COMMAND"] == "DEL"]
    assert [(c["type"], c["env"]["CNI_CONTAINERID"]) for c in deletes] == [
        ("second", "stale"),
        ("first", "stale"),
    ]
    assert deletes[0]["env"]["CNI_ARGS"] == "K=v"
    assert deletes[0]["conf"]["prevResult"]["ips"] == [{"address": "10.1.0.9/24"}]
    gcs = [c for c in calls if c["env"]["CNI_COMMAND"] == "GC"]
    assert [c["type"] for c in gcs] == ["first", "second"]
    expected = [{"containerID": "valid", "ifname": "eth0"}]
    for call in gcs:
        assert call["conf"]["cni.dev/valid-attachments"] == expected
        assert call["conf"]["cni.dev/attachments"] == expected
        assert call["env"]["CNI_CONTAINERID"] == call["env"]["CNI_IFNAME"] == ""
        assert "runtimeConfig" not in call["conf"]
    assert sorted(p.name for p in (rig.cache_dir / "results").iterdir()) == [
        "net-valid-eth0",
        "other-stale-eth0",
    ]


async def test_gc_skips_and_joins_errors(rig: Rig) -> None:
    await rig.engine().gc_network_list(_list("1.1.0", disableGC=True), [])
    await rig.engine().gc_network_list(_list("1.0.0"), [])  # no GC command below 1.1.0
    assert rig.calls() == []
    engine = rig.engine(FAIL_FIRST="7", FAIL_SECOND="8")
    with pytest.raises(CNIError) as info:
        await engine.gc_network_list(_list("1.1.0"), [])
    assert info.value.code == 7
    assert str(info.value) == (
        "failed to GC plugin first: first refuses; d\nfailed to GC plugin second: second refuses; d"
    )


async def test_status(rig: Rig) -> None:
    await rig.engine().get_status_network_list(_list("1.0.0"))
    assert rig.calls() == []
    await rig.engine().get_status_network_list(_list("1.1.0"))
    calls = rig.calls()
    assert [(c["type"], c["env"]["CNI_COMMAND"]) for c in calls] == [
        ("first", "STATUS"),
        ("second", "STATUS"),
    ]
    assert calls[0]["conf"]["name"] == "net"
    with pytest.raises(CNIError) as info:
        await rig.engine(FAIL_FIRST="50").get_status_network_list(_list("1.1.0"))
    assert info.value == CNIError(50, "first refuses", "d")  # unchanged, code and all
    assert [c["type"] for c in rig.calls()] == ["first"]


async def test_exec_timeout_kills_the_plugin(rig: Rig, make_plugin: MakePlugin) -> None:
    make_plugin("sleeper", "import time\ntime.sleep(60)\n")
    engine = CNI(
        rig.paths, SubprocessExecutor(kill_grace=0.1), str(rig.cache_dir), exec_timeout=0.3
    )
    sleeper = conf.conflist_from_bytes(
        b'{"name":"net","cniVersion":"1.0.0","plugins":[{"type":"sleeper"}]}'
    )
    with pytest.raises(CNIError) as info:
        await engine.add_network_list(sleeper, RT)
    assert info.value.code == errors.TRY_AGAIN_LATER
    assert info.value.msg.startswith('plugin type="sleeper" failed (add): netplugin ')
