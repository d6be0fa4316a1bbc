"""Bounded start-up and shutdown of the real daemon, and the API-facing faults seen from outside.

* SIGTERM is honoured at every start-up stage (waiting for the readiness indicator, for the
  primary CNI config, for the caches): the daemon stops at once, exit 0, leaving nothing behind.
* Shutdown with a plugin that will not finish: drain, then cancel (the plugin is killed), remove
  the socket, exit 0 well inside the manifests' terminationGracePeriodSeconds (30 s).
* A worker thread stuck on I/O cannot hold the process: it ends by the exit deadline.
* ``multusAutoconfigDir`` unset in auto mode is exit 2 at once, naming the key.
* ``/readyz`` says so when the API server goes away (status stays 200: pods in the cache can
  still be served), and says "caches synced" again once it is back.
* The ADD's network-status PATCH outlasts a run of 429s (Retry-After: 1) that the old five-try
  write gave up on.

Timeouts here are generous upper bounds that the old behaviour exceeded (the 120 s primary
wait, the 45 s readiness wait, 60 s+ of aiohttp shutdown), never speed assertions.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio

from multusd.kubesim import KubeSim
from multusd.kubesim.faults import ErrorRule
from tests.e2e.conftest import daemon_config, pod_env, shim_config
from tests.e2e.harness import Daemon, gated_plugin, run_shim, until_logged
from tests.e2e.kube import (
    NETWORK_STATUS,
    create_pod,
    readyz,
    start_kube,
    uid_env,
    unreachable_kubeconfig,
    until_caches,
)
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
GRACE = 30  # manifests/base/daemonset.yaml: terminationGracePeriodSeconds


async def _sigterm_and_wait(daemon: Daemon, bound: float) -> int:
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(bound):
        return await daemon.proc.wait()


@pytest_asyncio.fixture
async def unready(workdir: Path) -> AsyncIterator[Callable[..., Awaitable[Daemon]]]:
    """Factory: a daemon started without waiting for ``/readyz``; killed after the test."""
    started: list[Daemon] = []

    async def start(**config: Any) -> Daemon:
        daemon = Daemon(workdir, daemon_config(workdir, **config))
        started.append(daemon)
        await daemon.start(wait=False)
        return daemon

    yield start
    for daemon in started:
        if daemon.proc is not None and daemon.proc.returncode is None:
            daemon.proc.kill()
            await daemon.proc.wait()


def _auto(workdir: Path, autoconfig: Path, **extra: Any) -> dict[str, Any]:
    (workdir / "cni").mkdir(exist_ok=True)
    return {
        "multusConfigFile": "auto",
        "multusAutoconfigDir": str(autoconfig),
        "cniConfigDir": str(workdir / "cni"),
        "daemonSocketDir": str(workdir / "run"),
        **extra,
    }


# --- start-up -------------------------------------------------------------------------------


async def test_sigterm_while_waiting_for_the_primary_config(
    unready: Callable[..., Awaitable[Daemon]], workdir: Path
) -> None:
    empty = workdir / "primary"
    empty.mkdir()
    daemon = await unready(**_auto(workdir, empty))
    await until_logged(daemon, "waiting for a primary CNI config")
    assert await _sigterm_and_wait(daemon, 60) == 0, daemon.log()  # the wait is 120 s
    assert "received SIGTERM while waiting for the primary CNI config" in daemon.log()
    assert not (workdir / "cni" / "00-multus.conf").exists()
    assert not os.path.exists(daemon.socket_path)


async def test_sigterm_while_waiting_for_the_readiness_indicator(
    unready: Callable[..., Awaitable[Daemon]], workdir: Path, conflist_file: Path
) -> None:
    daemon = await unready(
        clusterNetwork=str(conflist_file), readinessindicatorfile=str(workdir / "not-yet")
    )
    await until_logged(daemon, "waiting for the readiness indicator")
    assert await _sigterm_and_wait(daemon, 40) == 0, daemon.log()  # the wait is 45 s
    assert not os.path.exists(daemon.socket_path)


async def test_sigterm_while_waiting_for_the_caches(
    unready: Callable[..., Awaitable[Daemon]], workdir: Path, conflist_file: Path
) -> None:
    kubeconfig = unreachable_kubeconfig(workdir)
    daemon = await unready(
        kubeconfig=str(kubeconfig), clusterNetwork=str(conflist_file), cacheSyncTimeoutSeconds=300
    )
    await until_logged(daemon, "waiting for the caches")
    assert os.path.exists(daemon.socket_path)  # bound before the caches fill, as upstream
    assert await _sigterm_and_wait(daemon, 60) == 0, daemon.log()
    assert not os.path.exists(daemon.socket_path)  # what it created is gone


async def test_unset_autoconfig_dir_is_exit_2_at_once(
    unready: Callable[..., Awaitable[Daemon]], workdir: Path
) -> None:
    daemon = await unready(**_auto(workdir, workdir, multusAutoconfigDir=""))
    assert daemon.proc is not None
    async with asyncio.timeout(60):  # not after 120 tries
        assert await daemon.proc.wait() == 2
    assert "multusAutoconfigDir is not set" in daemon.log()


async def test_a_worker_thread_stuck_on_io_cannot_hold_the_exit(
    unready: Callable[..., Awaitable[Daemon]], workdir: Path
) -> None:
    """The primary config is a FIFO nobody writes: reading it blocks a worker thread forever
    (as a hung NFS mount would). SIGTERM still ends the process, by the exit deadline."""
    primary = workdir / "primary"
    primary.mkdir()
    os.mkfifo(primary / "10-stuck.conflist")
    daemon = await unready(**_auto(workdir, primary))
    await eventually(lambda: _reading_fifo(daemon))  # a worker thread is in the blocking open
    assert await _sigterm_and_wait(daemon, GRACE + 30) == 0, daemon.log()
    assert "still running" in daemon.log()


def _reading_fifo(daemon: Daemon) -> bool:
    assert daemon.proc is not None
    for task in Path(f"/proc/{daemon.proc.pid}/task").iterdir():
        try:
            if (task / "wchan").read_text() == "wait_for_partner":  # open() of a FIFO
                return True
        except OSError:
            continue
    return False


# --- shutdown -------------------------------------------------------------------------------


async def test_sigterm_with_a_plugin_that_will_not_finish_exits_within_the_grace_period(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    bin_dir = workdir / "slowbin"
    bin_dir.mkdir()
    pid_file = workdir / "plugin.pid"
    slow = bin_dir / "stuck"
    slow.write_text(
        "#!/usr/bin/python3 -IS\nimport os, time, json, sys\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(600)\nprint(json.dumps({'cniVersion': '1.0.0'}))\n"
    )
    slow.chmod(slow.stat().st_mode | stat.S_IXUSR)
    delegate = {"cniVersion": "1.0.0", "name": "stuck", "type": "stuck"}
    daemon = await start_daemon(delegates=[delegate], binDir=str(bin_dir))
    add = asyncio.create_task(
        run_shim(shim_path, "ADD", shim_config(daemon), env=pod_env(await netns()))
    )
    # The plugin runs once its pid is in the file (created empty first, then written).
    await eventually(lambda: pid_file.exists() and pid_file.read_text() != "")
    plugin = int(pid_file.read_text())
    assert await _sigterm_and_wait(daemon, GRACE) == 0, daemon.log()
    assert not os.path.exists(daemon.socket_path)
    assert not Path(f"/proc/{plugin}").exists() or _zombie(plugin)  # killed, not orphaned
    added = await add
    assert added.returncode != 0  # cancelled with the shutdown, for the runtime to retry
    assert "still running after" in daemon.log()


def _zombie(pid: int) -> bool | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return None


async def test_sigterm_during_a_short_add_lets_it_finish(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    bin_dir = workdir / "slowbin"
    started, release = workdir / "plugin.started", workdir / "plugin.release"
    gated_plugin(bin_dir / "slow", started, release)  # runs until the test says so
    delegate = {"cniVersion": "1.0.0", "name": "slow", "type": "slow"}
    daemon = await start_daemon(delegates=[delegate], binDir=str(bin_dir))
    add = asyncio.create_task(
        run_shim(shim_path, "ADD", shim_config(daemon), env=pod_env(await netns()))
    )
    await eventually(started.exists)
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    # Shutdown has begun with the ADD in flight; it ends well inside the drain.
    await until_logged(daemon, "shutdown: waiting up to 10s for 1 request(s) in flight")
    release.touch()
    async with asyncio.timeout(GRACE):
        assert await daemon.proc.wait() == 0, daemon.log()
    added = await add
    assert added.returncode == 0, added
    assert not os.path.exists(daemon.socket_path)


# --- the API server -------------------------------------------------------------------------


async def test_readyz_tells_the_truth_while_the_api_server_is_away(
    start_daemon: StartDaemon, kubesim: KubeSim, workdir: Path, conflist_file: Path
) -> None:
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    assert await readyz(daemon) == (200, "caches synced")
    await kubesim.stop()
    await until_caches(daemon, lambda reason: "failing since" in reason)
    status, reason = await readyz(daemon)
    assert status == 200  # cached pods can still be served: the shim must not refuse them
    assert reason.startswith("caches synced; ")
    assert "pods: no watch, failing since" in reason
    assert "TransportError" in reason
    await kubesim.start()
    await until_caches(daemon, lambda reason: reason == "caches synced")


async def test_the_status_patch_outlasts_a_run_of_429s(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    uid = create_pod(kubesim, "web")
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    kubesim.faults.errors.append(
        ErrorRule(code=429, verb="patch", resource="pods", subresource="status", count=6)
    )
    kubesim.stats.reset()
    env = uid_env(await netns(), "web", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    pod = kubesim.get("pods", "default", "web", group="", version="v1")
    assert NETWORK_STATUS in pod["metadata"]["annotations"]
    assert kubesim.stats.count_code(429, "patch", "pods") == 6
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
