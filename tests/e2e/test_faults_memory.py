"""Memory limits, for real: the daemon in a memory cgroup of its own (created with a unique
name, removed after), plugins admitted against its headroom (``multusd.cni.admission``), and
the exec probe's cost.

The cgroup is made by ``bench.memory_limit.MemoryCgroup``, the rig of the 50 Mi benchmark: its
processes join it from birth, so every page they touch is charged to it. It is made on the
machine's own hierarchy: cgroup v1's memory controller on the project's machines (hybrid:
v1 controllers, the unified hierarchy without memory), v2 on a host that boots with v2 alone
(Debian 12's default), where the same tests run on ``memory.max``, ``memory.current`` and
``memory.events``. The v2 paths of the rig and of the daemon's reading also run on every
machine against v2 trees of plain files (``tests/unit/test_memory_cgroup_rig.py``,
``tests/unit/cni/test_cgroup_v2.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.memory_limit import MemoryCgroup
from multusd import probe
from multusd.cni.admission import PLUGIN_EXEC_BYTES, RESERVE_BYTES, MiB
from multusd.config.daemon import DEFAULT_CONFIG_PATH, DaemonConfig
from tests.e2e.conftest import daemon_config, pod_env, shim_config
from tests.e2e.harness import REPO, Daemon, run_shim

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]


@pytest.fixture
def cgroup() -> Iterator[MemoryCgroup]:
    with MemoryCgroup(256 * MiB, prefix="multusd-test") as made:
        yield made
    assert not made.path.exists()


class CgroupDaemon(Daemon):
    """The harness's daemon, started inside ``cgroup`` (it joins before ``exec``)."""

    cgroup: MemoryCgroup

    async def start(self, *, wait: bool = True) -> None:
        config_path = self.workdir / "daemon-config.json"
        config_path.write_text(json.dumps(self.config))
        argv = [sys.executable, "-m", "multusd", "--config", str(config_path)]
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.cgroup.argv(argv), stdout=log, stderr=log, cwd=REPO,
                env={**os.environ, **(self.env or {})},
            )  # fmt: skip
        if wait:
            await self.wait_ready()


async def _daemon_in(cgroup: MemoryCgroup, workdir: Path, **overrides: Any) -> CgroupDaemon:
    daemon = CgroupDaemon(workdir, daemon_config(workdir, **overrides))
    daemon.cgroup = cgroup
    await daemon.start()
    return daemon


def _lines_of(log: str, container_id: str) -> list[str]:
    return [line for line in log.splitlines() if repr(container_id) in line]


def _addresses_held(workdir: Path) -> list[str]:
    """host-local's reservations under the test's IPAM dir."""
    ipam = workdir / "ipam"
    return [
        p.name
        for network in (ipam.iterdir() if ipam.is_dir() else [])
        for p in network.iterdir()
        if not p.name.startswith(("last_reserved", "lock"))
    ]


def test_the_rig_makes_its_cgroup_on_the_machines_cgroup_version(cgroup: MemoryCgroup) -> None:
    """v2 where ``/sys/fs/cgroup`` is the unified hierarchy alone (``cgroup2fs``), else v1's
    memory controller (a tmpfs of v1 hierarchies, with the unified one beside them on a
    hybrid host)."""
    fstype = subprocess.run(
        ["stat", "-f", "-c", "%T", "/sys/fs/cgroup"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert cgroup.version == (2 if fstype == "cgroup2fs" else 1)
    limit = "memory.max" if cgroup.version == 2 else "memory.limit_in_bytes"
    assert (cgroup.path / limit).read_text() == f"{256 * MiB}\n"


def test_a_process_finds_its_own_cgroup_and_its_headroom(cgroup: MemoryCgroup) -> None:
    script = (
        "import json; from multusd.cni.cgroup import find_memory_cgroup as f; "
        "m = f(); r = m.read(); "
        "print(json.dumps([m.version, str(r.path), r.limit, r.used]))"
    )
    done = subprocess.run(
        cgroup.argv([sys.executable, "-c", script]),
        capture_output=True, text=True, timeout=60, cwd=REPO, check=True,
    )  # fmt: skip
    version, path, limit, used = json.loads(done.stdout)
    assert (version, path, limit) == (cgroup.version, str(cgroup.path), 256 * MiB)
    assert 0 < used < 64 * MiB  # an interpreter, not the machine


async def test_a_burst_in_a_tight_cgroup_queues_instead_of_being_killed(
    cgroup: MemoryCgroup,
    workdir: Path,
    netns: MakeNetns,
    shim_path: Path,
    conflist_file: Path,
) -> None:
    """A limit with room for the daemon and one plugin at a time: ten ADDs at once all
    succeed, one after another, and nothing is OOM-killed; their DELs free everything."""
    daemon = await _daemon_in(cgroup, workdir, clusterNetwork=str(conflist_file))
    try:
        config = shim_config(daemon)
        warm = pod_env(await netns())  # the first ADD imports what serving needs
        assert (await run_shim(shim_path, "ADD", config, env=warm)).returncode == 0
        assert (await run_shim(shim_path, "DEL", config, env=warm)).returncode == 0
        room = PLUGIN_EXEC_BYTES + RESERVE_BYTES + 3 * MiB  # one plugin, not two
        cgroup.set_limit(cgroup.unreclaimable() + room)
        kills = cgroup.oom_kills()
        envs = [pod_env(await netns()) for _ in range(10)]
        added = await asyncio.gather(*(run_shim(shim_path, "ADD", config, env=e) for e in envs))
        assert [r.returncode for r in added] == [0] * 10, [r.stdout for r in added]
        assert cgroup.oom_kills() == kills
        assert daemon.proc is not None and daemon.proc.returncode is None
        assert "plugin executions queue" in daemon.log()
        deleted = await asyncio.gather(*(run_shim(shim_path, "DEL", config, env=e) for e in envs))
        assert [r.returncode for r in deleted] == [0] * 10
        assert _addresses_held(workdir) == []
        assert [p for p in daemon.cni_dir.rglob("*") if p.is_file()] == []  # no cache left
    finally:
        assert await daemon.stop() == 0


async def test_no_room_until_the_deadline_is_code_11_and_leaves_nothing(
    cgroup: MemoryCgroup,
    workdir: Path,
    netns: MakeNetns,
    shim_path: Path,
    conflist_file: Path,
) -> None:
    """Less headroom than one plugin needs: the ADD waits for its request's deadline, then
    fails with "try again later" (the runtime retries) instead of starting a plugin that would
    get the daemon OOM-killed; nothing is left behind."""
    daemon = await _daemon_in(
        cgroup, workdir, clusterNetwork=str(conflist_file), requestTimeoutSeconds=3,
        logLevel="debug",
    )  # fmt: skip
    try:
        config = shim_config(daemon)
        warm = pod_env(await netns())
        assert (await run_shim(shim_path, "ADD", config, env=warm)).returncode == 0
        assert (await run_shim(shim_path, "DEL", config, env=warm)).returncode == 0
        cgroup.set_limit(cgroup.unreclaimable() + PLUGIN_EXEC_BYTES + RESERVE_BYTES // 2)
        env = pod_env(await netns())
        added = await run_shim(shim_path, "ADD", config, env=env)
        assert added.returncode != 0
        error = added.json()
        assert error["code"] == 11, error
        assert "not run" in error["msg"] and "MiB free under the memory limit" in error["msg"]
        assert daemon.proc is not None and daemon.proc.returncode is None
        assert _addresses_held(workdir) == []
        cid = env["CNI_CONTAINERID"]
        # No plugin of it ever ran, so there is nothing to roll back: no DEL is run for it.
        assert not [line for line in _lines_of(daemon.log(), cid) if "exec DEL" in line]
        cgroup.set_limit(256 * MiB)  # room again: the runtime's retry succeeds
        assert (await run_shim(shim_path, "ADD", config, env=env)).returncode == 0
        assert (await run_shim(shim_path, "DEL", config, env=env)).returncode == 0
    finally:
        assert await daemon.stop() == 0


# --- the exec probe ---------------------------------------------------------------------------


def test_the_probe_imports_nothing_of_the_daemon_and_volunteers_for_the_oom_killer(
    tmp_path: Path,
) -> None:
    """``multusd probe`` runs in the daemon's cgroup up to three times every 10 s: it must not
    pay for asyncio or the daemon's modules (21.5 MiB measured before; the interpreter alone is
    ~10), and if the cgroup runs out of memory anyway, it is the one to go, not the daemon."""
    script = (
        "import sys; from multusd.cli import main; code = main(sys.argv[1:]); "
        "heavy = sorted(m for m in sys.modules if m == 'asyncio' or m.startswith("
        "('multusd.config', 'multusd.server', 'multusd.cni', 'multusd.k8s', 'aiohttp')));"
        "adj = open('/proc/self/oom_score_adj').read().strip(); "
        "print(heavy, adj, file=sys.stderr); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "probe", "--socket-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "multus.sock" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[] 1000"


def test_the_probe_reads_socket_dir_as_the_daemon_does(tmp_path: Path) -> None:
    assert probe.DEFAULT_CONFIG_PATH == DEFAULT_CONFIG_PATH
    assert DaemonConfig().socket_dir == probe.DEFAULT_SOCKET_DIR
    path = tmp_path / "daemon-config.json"
    for raw, expected in (
        ({}, DaemonConfig().socket_dir),
        ({"socketDir": "/a"}, "/a"),
        ({"SocketDir": "/a", "socketdir": "/b"}, "/b"),  # keys ignore case; the last wins
        ({"socketDir": "/a", "logToStderr": "yes"}, "/a"),  # the daemon's to check
    ):
        path.write_text(json.dumps(raw))
        assert probe.socket_dir_of(str(path)) == expected
    for text, problem in (
        (json.dumps({"socketDir": None}), "key 'socketDir': expected a string, got null"),
        (json.dumps({"socketDir": 3}), "key 'socketDir': expected a string, got int"),
        ("[]", "expected a JSON object"),
        ("{", "not valid JSON"),
    ):
        path.write_text(text)
        with pytest.raises(probe.ProbeConfigError, match=problem):
            probe.socket_dir_of(str(path))
    with pytest.raises(probe.ProbeConfigError, match="No such file or directory"):
        probe.socket_dir_of(str(tmp_path / "missing.json"))


def test_the_probe_costs_the_cgroup_a_few_mib(cgroup: MemoryCgroup, tmp_path: Path) -> None:
    """Measured by the kernel: the probe's peak charge to the cgroup it runs in. The cgroup is
    new and empty, so its peak is the probe's even where the kernel cannot reset one (v2's
    ``memory.peak`` takes a reset from 6.12; Debian 12 runs 6.1)."""
    multusd = Path(sys.executable).with_name("multusd")
    cgroup.reset_peak()
    base = cgroup.usage()
    done = subprocess.run(
        cgroup.argv([str(multusd), "probe", "--socket-dir", str(tmp_path)]),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "multus.sock" in done.stderr
    peak = cgroup.peak()
    assert peak is not None
    assert peak - base < 9 * MiB  # 6 MiB measured (12 before), 4.6 of it the interpreter's
