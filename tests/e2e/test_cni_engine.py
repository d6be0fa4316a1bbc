"""The CNI engine against the real reference plugins, in real network namespaces (root only).

Each test gets its own netns, bridge name, host-local ``dataDir`` and cache directory, and the
fixtures remove all of them whatever the outcome.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni_shim import results
from cni_shim.errors import CNIError
from multusd.cni import conf
from multusd.cni.api import CNI, RuntimeConf
from multusd.cni.invoke import LibcniError, SubprocessExecutor
from tests.e2e.conftest import tuning_plugin
from tests.e2e.harness import ip
from tests.netns import pin_netns, unpin_netns

pytestmark = pytest.mark.netns

PLUGIN_DIR = "/usr/lib/cni"
VERSIONS = ["0.3.1", "0.4.0", "1.0.0"]


async def _ip_json(netns_flag: str, netns: str, *args: str) -> Any:
    return json.loads(await ip(netns_flag, netns, "-j", *args) or "[]")


class Env:
    """Per-test names and directories, all removed on teardown."""

    def __init__(self, base: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.netns = f"cnie2e{tag}"
        self.netns_path = str(base / self.netns)  # pinned there (not ip netns: /run/netns)
        self.bridge = f"cbr{tag}"
        self.subnet_octet = random.randint(1, 250)
        self.data_dir = base / "ipam"
        self.cache_dir = base / "cache"
        self.base = base

    @property
    def subnet(self) -> str:
        return f"10.251.{self.subnet_octet}.0/24"

    def bridge_conf(self, version: str, *, name: str = "e2enet") -> dict[str, Any]:
        return {
            "cniVersion": version,
            "name": name,
            "type": "bridge",
            "bridge": self.bridge,
            "ipMasq": False,
            "ipam": {"type": "host-local", "subnet": self.subnet, "dataDir": str(self.data_dir)},
        }

    def reservations(self, network: str = "e2enet") -> list[str]:
        directory = self.data_dir / network
        if not directory.exists():
            return []
        return sorted(p.name for p in directory.iterdir() if p.name.startswith("10."))


@pytest.fixture
def env() -> Iterator[Env]:
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="cnie2e"))
    state = Env(base)
    pin_netns(Path(state.netns_path))
    try:
        yield state
    finally:
        unpin_netns(Path(state.netns_path))
        subprocess.run(["ip", "link", "del", state.bridge], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _engine(env: Env) -> CNI:
    return CNI([PLUGIN_DIR], SubprocessExecutor(), str(env.cache_dir), exec_timeout=30)


def _rt(env: Env, **kw: Any) -> RuntimeConf:
    return RuntimeConf(
        container_id="e2e-" + env.netns,
        netns=env.netns_path,
        ifname="eth0",
        args=(("IgnoreUnknown", "true"), ("K8S_POD_NAME", "pod")),
        **kw,
    )


async def _addresses(env: Env, ifname: str = "eth0") -> list[str]:
    links = await _ip_json("-n", env.netns_path, "addr", "show")
    for link in links:
        if link["ifname"] == ifname:
            return [
                f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"
            ]
    return []


async def _link(env: Env, ifname: str = "eth0") -> dict[str, Any] | None:
    for link in await _ip_json("-n", env.netns_path, "link", "show"):
        if link["ifname"] == ifname:
            return dict(link)
    return None


def _cache_file(env: Env, network: str = "e2enet", ifname: str = "eth0") -> Path:
    return env.cache_dir / "results" / f"{network}-e2e-{env.netns}-{ifname}"


@pytest.mark.parametrize("version", VERSIONS)
async def test_single_conf_add_check_del(env: Env, version: str) -> None:
    engine = _engine(env)
    plugin = conf.conf_from_bytes(json.dumps(env.bridge_conf(version)).encode())
    rt = _rt(env)

    result = await engine.add_network(plugin, rt)
    wire = results.to_wire(result)
    assert wire["cniVersion"] == version
    address = wire["ips"][0]["address"]
    assert address.startswith(f"10.251.{env.subnet_octet}.")
    assert await _addresses(env) == [address]
    assert env.reservations() == [address.split("/")[0]]
    cached = json.loads(_cache_file(env).read_bytes())
    assert cached["kind"] == "cniCacheV1"
    assert cached["result"]["ips"][0]["address"] == address

    if version == "0.3.1":
        with pytest.raises(LibcniError) as info:
            await engine.check_network(plugin, rt)
        assert info.value.msg == 'configuration version "0.3.1" does not support the CHECK command'
    else:
        await engine.check_network(plugin, rt)

    await engine.del_network(plugin, rt)
    assert await _link(env) is None
    assert env.reservations() == []
    assert not _cache_file(env).exists()


@pytest.mark.parametrize("version", VERSIONS)
async def test_conflist_chain_with_capabilities(env: Env, version: str) -> None:
    engine = _engine(env)
    listing = {
        "cniVersion": version,
        "name": "e2enet",
        "plugins": [
            {k: v for k, v in env.bridge_conf(version).items() if k not in ("cniVersion", "name")},
            tuning_plugin(env.base, capabilities={"mac": True}),
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        ],
    }
    conflist = conf.conflist_from_bytes(json.dumps(listing).encode())
    mac = "c2:11:22:33:44:55"
    # ``ips`` is not a declared capability of any plugin here, so nobody may receive it.
    rt = _rt(env, capability_args={"mac": mac, "portMappings": [], "ips": ["10.9.9.9/24"]})

    result = await engine.add_network_list(conflist, rt)
    wire = results.to_wire(result)
    address = wire["ips"][0]["address"]
    assert await _addresses(env) == [address]
    link = await _link(env)
    assert link is not None and link["address"] == mac  # tuning got runtimeConfig.mac

    if version == "0.3.1":
        with pytest.raises(LibcniError, match="does not support the CHECK command"):
            await engine.check_network_list(conflist, rt)
    else:
        await engine.check_network_list(conflist, rt)

    await engine.del_network_list(conflist, rt)
    assert await _link(env) is None
    assert env.reservations() == []
    assert not _cache_file(env).exists()


async def test_add_failure_is_prefixed_and_keeps_code(env: Env) -> None:
    engine = _engine(env)
    bad = env.bridge_conf("1.0.0")
    bad["ipam"] = {"type": "host-local", "dataDir": str(env.data_dir)}  # no subnet/ranges
    listing = {"cniVersion": "1.0.0", "name": "e2enet", "plugins": [bad]}
    conflist = conf.conflist_from_bytes(json.dumps(listing).encode())
    with pytest.raises(CNIError) as info:
        await engine.add_network_list(conflist, _rt(env))
    assert info.value == CNIError(
        999, 'plugin type="bridge" name="e2enet" failed (add): no IP ranges specified'
    )
    assert not _cache_file(env).exists()


async def test_chroot_runs_the_binary_inside_the_tree(tmp_path: Path) -> None:
    """A real chroot: the same absolute path names a Python script outside and the Go
    ``loopback`` plugin inside, so the VERSION answer proves where it ran."""
    bin_dir = Path(tempfile.mkdtemp(dir="/tmp", prefix="cnichr"))
    root = tmp_path / "root"
    try:
        outside = bin_dir / "probe"
        outside.write_text("#!/usr/bin/python3 -IS\nprint('outside')\n")
        outside.chmod(0o755)
        inside = root / bin_dir.relative_to("/") / "probe"
        inside.parent.mkdir(parents=True)
        shutil.copy(f"{PLUGIN_DIR}/loopback", inside)
        for lib in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"):
            target = root / lib.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(lib, target)  # follows the symlinks
        env = {"CNI_COMMAND": "VERSION"}
        plain = await SubprocessExecutor().execute(str(outside), b"{}", env, timeout=10)
        assert plain == b"outside\n"
        chrooted = await SubprocessExecutor(str(root)).execute(str(outside), b"{}", env, timeout=10)
        assert json.loads(chrooted)["supportedVersions"][-1] == "1.0.0"
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)


async def test_chroot_to_root_changes_directory(tmp_path: Path) -> None:
    plugin = tmp_path / "cwd"
    plugin.write_text(
        "#!/usr/bin/python3 -IS\n"
        + textwrap.dedent(
            """
            import os
            print(os.getcwd())
            """
        )
    )
    plugin.chmod(0o755)
    out = await SubprocessExecutor("/").execute(str(plugin), b"", {}, timeout=10)
    assert out == b"/\n"


async def test_chroot_failure_is_a_plugin_error(tmp_path: Path) -> None:
    plugin = tmp_path / "x"
    plugin.write_text("#!/usr/bin/python3 -IS\n")
    plugin.chmod(0o755)
    with pytest.raises(Exception, match="netplugin failed with no error message: fork/exec"):
        await SubprocessExecutor(str(tmp_path / "missing")).execute(
            str(plugin), b"", {}, timeout=10
        )
