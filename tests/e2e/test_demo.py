"""``multusd demo``: the README's first command, end to end, leaving nothing behind, from the
checkout and from an installed wheel.

"Nothing behind" is checked on the host: the node paths the daemon and the plugins default to
(``/etc/cni``, ``/var/lib/cni``, ``/run/multus``, ...) are snapshotted before and after each
run, with ``/run/netns``, the mounts and the links. Other engineers' tests (and demos) run on
this machine at the same time, so only what could be this run's is compared: whole trees where
nothing but a CNI component should write, and elsewhere the entries that name this very run
(its tag, in ``mdemo<tag>…`` links and the container ID ``demo<tag>``, and its temp dir), read
from its output.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from multusd.config.daemon import DaemonConfig, parse_daemon_config
from multusd.demo_rig import DemoDirs, cluster_network, confine, daemon_config, example
from tests.e2e.harness import PLUGIN_DIR, REPO, ip
from tests.hostsnap import FORWARDING_SYSCTLS, host_links, sysctls, tree
from tests.image.containerfile import copy_sources

# Trees only CNI components write (every test keeps its own files in temp dirs): compared whole.
WHOLE = (
    "/etc/cni",
    "/opt/cni",
    "/var/lib/cni/networks",  # host-local's default dataDir
    "/var/lib/cni/multus",  # the daemon's default cniDir
    "/run/multus",  # the daemon's default socketDir
    "/run/cni",  # tuning's default dataDir
    "/run/k8s.cni.cncf.io",  # device information
    "/var/lib/kubelet",
)
# libcni's result cache, which the container runtime of other tests writes: only entries
# naming the demo's container (``demo<tag>``) count.
SHARED = ("/var/lib/cni",)
DEMO_NAME = re.compile(r"mdemo|demo-net|demo\d|multusd-demo|bridge-conf|macvlan-conf")
EXAMPLE_BRIDGE = "mbr-example"  # the example NAD's own name, which the demo renames


@dataclass(frozen=True)
class DemoRun:
    """What one demo run names its things after: the tag of its interfaces (``mdemo<tag>``,
    ``mdemo<tag>b``, ...) and of its container (``demo<tag>``), and its temp dir."""

    tag: str
    workdir: str

    @classmethod
    def of(cls, out: str) -> DemoRun:
        """The run whose output is ``out``: its cluster network's bridge and its workdir."""
        tag = re.search(r'"name": "mdemo(\d+)"', out)
        workdir = re.search(r"^== multusd demo \(workdir (/tmp/mdemo-\w+); ", out, re.M)
        assert tag and workdir, out
        return cls(tag[1], workdir[1])

    def names(self, text: str) -> bool:
        return self.workdir in text or re.search(rf"demo{self.tag}(?!\d)", text) is not None


Snapshot = dict[str, Any]


async def snapshot() -> Snapshot:
    """What a demo could leave on the host (see the module doc); :func:`assert_unchanged`
    narrows it to one run's."""
    whole = {root: tree(root, digest=True) for root in WHOLE}
    shared = {
        root: {p: v for p, v in tree(root, digest=True).items() if DEMO_NAME.search(p)}
        for root in SHARED
    }
    netns_dir = Path("/run/netns")
    netns = sorted(p.name for p in netns_dir.iterdir() if DEMO_NAME.search(p.name)) if (
        netns_dir.is_dir()
    ) else []  # fmt: skip
    mounts = [
        line for line in Path("/proc/self/mountinfo").read_text().splitlines() if "mdemo" in line
    ]
    links = {
        name: line
        for name, line in host_links().items()
        if DEMO_NAME.search(line) or EXAMPLE_BRIDGE in line
    }
    temp = sorted(str(p) for p in Path("/tmp").glob("mdemo-*"))
    return {
        "sysctls": sysctls(),  # the bridge's isGateway turns forwarding on where it runs
        "whole": whole,
        "shared": shared,
        "netns": netns,
        "mounts": mounts,
        "links": links,
        "temp": temp,
    }


def mine(snap: Snapshot, run: DemoRun) -> Snapshot:
    """``snap`` with only what names ``run`` (the trees compared whole stay whole)."""
    return {
        "sysctls": snap["sysctls"],
        "whole": snap["whole"],
        "shared": {
            root: {p: v for p, v in entries.items() if run.names(p)}
            for root, entries in snap["shared"].items()
        },
        "netns": [name for name in snap["netns"] if run.names(name)],
        "mounts": [line for line in snap["mounts"] if run.names(line)],
        "links": sorted(
            name
            for name, line in snap["links"].items()
            if run.names(line) or EXAMPLE_BRIDGE in line
        ),
        "temp": [path for path in snap["temp"] if run.names(path)],
    }


def assert_unchanged(before: Snapshot, after: Snapshot, run: DemoRun) -> None:
    was, now = mine(before, run), mine(after, run)
    for key in was:
        assert now[key] == was[key], f"the demo changed the host's {key}"


async def _demo(*prefix: str, python: str = sys.executable, cwd: Path = REPO,
                env: dict[str, str] | None = None) -> tuple[int, str, str]:  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *prefix, python, "-m", "multusd", "demo",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _assert_wired(out: str) -> None:
    assert '"cniVersion": "1.0.0"' in out
    assert "eth0" in out and "10.250.77." in out
    assert "net1" in out and "10.88.10." in out  # the bridge NAD
    assert "net2" in out and "10.88.20.10/24" in out  # the macvlan NAD with its requested IP
    assert '"name": "default/macvlan-conf"' in out  # the network-status annotation
    assert "-- CHECK\nok" in out and "-- DEL\nok" in out
    assert re.search(r"netns /tmp/mdemo-\w+/netns\)", out)  # in its temp dir, not /run/netns
    assert "a network namespace of its own is the node" in out  # its links and sysctls


async def test_demo_wires_a_namespace_and_leaves_the_host_as_it_was() -> None:
    before = await snapshot()
    code, out, err = await _demo()
    assert code == 0, out + err
    _assert_wired(out)
    assert_unchanged(before, await snapshot(), DemoRun.of(out))


async def test_demo_leaves_forwarding_off_where_it_was_off() -> None:
    """This machine may already forward (then the snapshot above cannot see a flip): run the
    demo from a fresh network namespace standing in for a machine that does not (forwarding
    switched off there), and read its forwarding switches after. The cluster network's
    ``isGateway`` turns them on only in the demo's own node namespace."""
    ipv4 = FORWARDING_SYSCTLS[:2]  # the switches isGateway turns on (a new namespace may
    off = " && ".join(f"echo 0 > {path}" for path in ipv4)  # inherit the machine's: set off)
    read = "cat " + " ".join(ipv4)
    script = f'ip link set lo up && {off} && {read} && "$@" >/dev/null && {read}'
    proc = await asyncio.create_subprocess_exec(
        "unshare", "--net", "sh", "-c", script, "sh", sys.executable, "-m", "multusd", "demo",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    values = out.decode().split()
    assert values == ["0", "0", "0", "0"], values


async def test_demo_without_root_exits_2_with_a_clear_message() -> None:
    setpriv = shutil.which("setpriv")
    assert setpriv, "util-linux's setpriv is part of every Debian install"
    code, _out, err = await _demo(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
    assert code == 2
    assert "needs root" in err


# --- from a wheel: the demo's data is package data, not the checkout's manifests/ ------------


@pytest.fixture(scope="module")
def installed() -> Iterator[Path]:
    """A fresh venv holding the built wheel; the dependencies come from the test venv's
    site-packages by a .pth line (no downloads), whose editable multusd is not activated that
    way (.pth files are processed in site dirs only), so ``multusd`` is the wheel's. The wheel
    is built offline, from a copy of the sources (the checkout gets no ``build/``), with the
    test venv's setuptools (no isolated build environment to download)."""
    root = Path(tempfile.mkdtemp(prefix="mt-wheel-", dir="/tmp"))
    try:
        dist, venv = root / "dist", root / "venv"
        source = copy_sources(root / "source")
        _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
             "--no-build-isolation", "-w", str(dist), str(source))  # fmt: skip
        (wheel,) = dist.glob("multusd-*.whl")
        _run("/usr/bin/python3", "-m", "venv", str(venv))
        _run(str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
             str(wheel))  # fmt: skip
        # Only now: with the test venv on its path, pip would see the test venv's multusd (tox
        # installs it as a wheel too) as "already satisfied" and install nothing.
        (site,) = venv.glob("lib/python3*/site-packages")
        (site / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        yield venv
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stdout}{done.stderr}"


def _outside_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}


def test_the_wheel_carries_the_examples_the_demo_loads(installed: Path, tmp_path: Path) -> None:
    probe = (
        "import json, multusd, multusd.demo_rig as d\n"
        "print(json.dumps({'file': multusd.__file__, 'examples': {n: d.example(n) for n in "
        "('bridge-nad.yaml', 'macvlan-nad.yaml', 'pod.yaml')}}))\n"
    )
    done = subprocess.run(
        [str(installed / "bin/python"), "-c", probe],
        cwd=tmp_path, env=_outside_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert Path(found["file"]).is_relative_to(installed), found["file"]  # not the checkout
    for name, loaded in found["examples"].items():
        assert loaded == yaml.safe_load((REPO / "manifests/examples" / name).read_text())


async def test_demo_runs_from_the_wheel_and_leaves_the_host_as_it_was(
    installed: Path, tmp_path: Path
) -> None:
    before = await snapshot()
    code, out, err = await _demo(python=str(installed / "bin/python"), cwd=tmp_path,
                                 env=_outside_env())  # fmt: skip
    assert code == 0, out + err
    _assert_wired(out)
    assert_unchanged(before, await snapshot(), DemoRun.of(out))


# --- what the demo hands the daemon and the plugins (no root needed) -------------------------


def test_every_path_the_daemon_uses_is_in_the_demos_temp_dir(short_tmp: Path) -> None:
    """Set or defaulted: a path key added to the daemon later fails here until the demo sets it."""
    dirs = DemoDirs(short_tmp)
    raw = daemon_config(dirs, PLUGIN_DIR, dirs.conf_dir / "10-demo.conflist")
    config, _ = parse_daemon_config(json.dumps(raw).encode())
    assert config.extra == {}
    paths = {
        name: value
        for name in DaemonConfig.model_fields
        if isinstance(value := getattr(config, name), str) and value.startswith("/")
    }
    assert paths.pop("bin_dir") == PLUGIN_DIR  # read only: the real plugins
    assert {"cni_config_dir", "cni_dir", "socket_dir", "conf_dir"} <= set(paths)
    for name, value in paths.items():
        assert Path(value).is_relative_to(short_tmp), (name, value)


def test_every_plugin_keeps_its_state_in_the_demos_temp_dir(short_tmp: Path) -> None:
    """host-local and tuning default to /var/lib/cni/networks and /run/cni/tuning."""
    dirs = DemoDirs(short_tmp)
    configs = [cluster_network(dirs, "mdemo1")]
    for name in ("bridge-nad.yaml", "macvlan-nad.yaml"):
        configs.append(confine(json.loads(example(name)["spec"]["config"]), dirs))
    plugins = [p for c in configs for p in c.get("plugins", [c])]
    assert {p["type"] for p in plugins} == {"bridge", "tuning", "macvlan"}
    for plugin in plugins:
        if plugin.get("ipam", {}).get("type") == "host-local":
            assert plugin["ipam"]["dataDir"] == str(dirs.ipam)
        if plugin["type"] == "tuning":
            assert plugin["dataDir"] == str(dirs.tuning)
    # The examples themselves keep the defaults: right on a kind node (docs/quickstart.md).
    assert "dataDir" not in example("bridge-nad.yaml")["spec"]["config"]


async def test_the_snapshot_sees_what_a_leaky_demo_would_leave(short_tmp: Path) -> None:
    """The comparisons above are not blind: a link, temp dir and netns mount named as a run's
    show, and only those of that run."""
    before = await snapshot()
    tag = f"{os.getpid() % 100000}"
    link = f"mdemo{tag}t"
    leftover = Path(tempfile.mkdtemp(prefix="mdemo-", dir="/tmp"))
    pinned = leftover / "netns"
    pinned.touch()
    run, other = DemoRun(tag, str(leftover)), DemoRun(f"{tag}0", "/tmp/mdemo-not-this-one")
    try:
        await ip("link", "add", link, "type", "veth", "peer", "name", f"{link}x")
        subprocess.run(["unshare", f"--net={pinned}", "true"], check=True, timeout=30)
        after = await snapshot()
        for key in ("links", "temp", "mounts"):
            assert mine(after, run)[key] != mine(before, run)[key], key
            assert mine(after, other)[key] == mine(before, other)[key], key
    finally:
        subprocess.run(["umount", str(pinned)], check=False, timeout=30)
        await ip("link", "del", link, check=False)
        shutil.rmtree(leftover, ignore_errors=True)
    # A tree compared whole notices a new file and a rewritten one.
    entries = tree(str(short_tmp), digest=True)
    (short_tmp / "00-multus.conf").write_text("{}")
    assert tree(str(short_tmp), digest=True) != entries
    entries = tree(str(short_tmp), digest=True)
    (short_tmp / "00-multus.conf").write_text("[]")
    assert tree(str(short_tmp), digest=True) != entries
