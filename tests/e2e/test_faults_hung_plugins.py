"""No request can wedge the daemon: a plugin that hangs on ADD is killed with its whole process
group when the runtime gives up (the shim is killed), when a DEL for the same container comes,
when the request's deadline passes, or when the daemon is stopped; its partial work is rolled
back, no address leaks, and the probes keep answering meanwhile (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.e2e.conftest import pod_env, shim_config
from tests.e2e.faults import HangRig, hang_rig, no_traceback, wait_gone
from tests.e2e.harness import Daemon, run_shim, until_logged
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]


async def _rig_daemon(
    start_daemon: StartDaemon, workdir: Path, bridge_name: str, **extra: Any
) -> tuple[Daemon, HangRig]:
    rig = hang_rig(workdir)
    daemon = await start_daemon(
        delegates=rig.delegates(bridge_name, workdir), binDir=str(rig.bin_dir), **extra
    )
    return daemon, rig


async def _start_shim(
    shim: Path, command: str, config: dict[str, Any], env: dict[str, str]
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        str(shim),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env, "CNI_COMMAND": command},
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(config).encode())
    proc.stdin.close()
    return proc


async def _healthy(daemon: Daemon) -> bool:
    async with asyncio.timeout(10):
        return (await daemon.request("GET", "/healthz"))[0] == 200


async def test_a_killed_shim_cancels_its_add_and_kills_the_plugin_group(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    daemon, rig = await _rig_daemon(start_daemon, workdir, bridge_name)
    env = pod_env(await netns())
    cid = env["CNI_CONTAINERID"]
    shim = await _start_shim(shim_path, "ADD", shim_config(daemon), env)
    leader, child = await rig.pids(cid)
    assert rig.reserved_ips(), "the cluster network got its address before the hang"
    shim.kill()  # what containerd does when its own deadline passes
    await shim.wait()
    assert await wait_gone(leader, child), "the plugin and its child are killed and reaped"
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0, deleted
    assert rig.reserved_ips() == []
    assert not (daemon.cni_dir / cid).exists()
    assert "cancelled" in daemon.log()
    assert no_traceback(daemon.log())


async def test_a_del_supersedes_a_hung_add_of_the_same_container(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    daemon, rig = await _rig_daemon(start_daemon, workdir, bridge_name)
    env = pod_env(await netns())
    cid = env["CNI_CONTAINERID"]
    add = asyncio.create_task(run_shim(shim_path, "ADD", shim_config(daemon), env=env))
    leader, child = await rig.pids(cid)
    # A second ADD for the same sandbox (a runtime retry) waits behind the first.
    retry = asyncio.create_task(run_shim(shim_path, "ADD", shim_config(daemon), env=env))
    # Queued behind the first ADD (so the DEL supersedes it too): the daemon logs it at debug.
    await until_logged(daemon, f"container {cid}: waiting behind 1 earlier request(s)")
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0, deleted
    for superseded in await asyncio.gather(add, retry):
        assert superseded.returncode == 1
        assert "superseded by a DEL" in superseded.json()["msg"], superseded
    assert await wait_gone(leader, child)
    assert rig.reserved_ips() == [], "the cluster network's address is released"
    assert not (daemon.cni_dir / cid).exists()
    assert no_traceback(daemon.log())


async def test_the_plugin_timeout_kills_the_group_and_rolls_back(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    daemon, rig = await _rig_daemon(start_daemon, workdir, bridge_name, pluginTimeoutSeconds=1)
    env = pod_env(await netns())
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 1
    error = added.json()
    assert error["code"] == 11, error
    assert "did not finish within 1s and was killed" in error["msg"]
    leader, child = await rig.pids(env["CNI_CONTAINERID"])
    assert await wait_gone(leader, child)
    assert rig.reserved_ips() == []


async def test_the_request_deadline_bounds_a_plugin_without_a_timeout(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    daemon, rig = await _rig_daemon(start_daemon, workdir, bridge_name, requestTimeoutSeconds=2)
    env = pod_env(await netns())
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 1
    error = added.json()
    assert error["code"] == 11, error
    assert "the request's deadline" in error["msg"]
    leader, child = await rig.pids(env["CNI_CONTAINERID"])
    assert await wait_gone(leader, child)
    assert rig.reserved_ips() == []
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0, deleted


async def test_probes_answer_while_plugins_hang(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    daemon, rig = await _rig_daemon(start_daemon, workdir, bridge_name, connectionLimit=2)
    envs = [pod_env(await netns()) for _ in range(3)]
    adds = [
        asyncio.create_task(run_shim(shim_path, "ADD", shim_config(daemon), env=e)) for e in envs
    ]
    # Two of them hang; the third waits for a slot, and the daemon says so.
    await eventually(lambda: len(list(rig.pids_dir.iterdir())) >= 2, 60)
    await until_logged(daemon, "connectionLimit 2 reached: waiting for a slot (1 in line)")
    assert len(list(rig.pids_dir.iterdir())) == 2, "connectionLimit holds the third back"
    for _ in range(5):
        assert await _healthy(daemon)
        async with asyncio.timeout(10):
            assert (await daemon.request("GET", "/readyz"))[0] == 200
    # The hung ones first (the shims race to connect, so any two may be the hung ones): a DEL
    # of the waiting ADD's container has no slot to inherit and would wait for one.
    running = {path.name for path in rig.pids_dir.iterdir()}
    envs.sort(key=lambda env: env["CNI_CONTAINERID"] not in running)
    for env in envs:
        assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
    await asyncio.gather(*adds)
    assert rig.reserved_ips() == []


async def test_adds_beyond_max_active_wait_unread_and_a_del_supersedes_them(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    daemon, rig = await _rig_daemon(start_daemon, workdir, bridge_name, maxActiveRequests=2)
    envs = [pod_env(await netns()) for _ in range(3)]
    adds = [
        asyncio.create_task(run_shim(shim_path, "ADD", shim_config(daemon), env=e)) for e in envs
    ]
    # Two of them hang; the third is not even read.
    await eventually(lambda: len(list(rig.pids_dir.iterdir())) >= 2, 60)
    running = {path.name for path in rig.pids_dir.iterdir()}
    # Whichever shim connected last is the one not read (the shims race to connect).
    (unread,) = [i for i, env in enumerate(envs) if env["CNI_CONTAINERID"] not in running]
    assert not (daemon.cni_dir / envs[unread]["CNI_CONTAINERID"]).exists()
    for _ in range(3):
        assert await _healthy(daemon)
    # The DEL of the unread ADD's container ends that ADD without it ever running.
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=envs[unread])
    assert deleted.returncode == 0, deleted
    superseded = await adds[unread]
    assert superseded.returncode == 1
    assert "superseded by a DEL" in superseded.json()["msg"], superseded
    assert len(list(rig.pids_dir.iterdir())) == 2, "the superseded ADD never ran a plugin"
    # The DELs of the hung ones take the DELs' reserve of slots and supersede them in turn.
    hung = [i for i in range(3) if i != unread]
    for i in hung:
        assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=envs[i])).returncode == 0
    for i in hung:
        assert (await adds[i]).returncode == 1
    assert rig.reserved_ips() == []
    assert no_traceback(daemon.log())


async def test_sigterm_with_a_hung_add_exits_and_leaves_no_plugin(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    daemon, rig = await _rig_daemon(start_daemon, workdir, bridge_name)
    env = pod_env(await netns())
    add = asyncio.create_task(run_shim(shim_path, "ADD", shim_config(daemon), env=env))
    leader, child = await rig.pids(env["CNI_CONTAINERID"])
    # Inside the DaemonSet's 30 s grace period: the 10 s drain, then cancel, kill, roll back.
    assert await daemon.stop(signal.SIGTERM, timeout=30) == 0, daemon.log()
    assert await wait_gone(leader, child, timeout=5)
    added = await add
    assert added.returncode == 1
    assert rig.reserved_ips() == [], "the cancelled ADD was rolled back"
    assert no_traceback(daemon.log())
