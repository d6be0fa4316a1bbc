"""Lifecycle of the real daemon: the generated ``00-multus.conf`` (used by the real shim), its
regeneration, the readiness indicator, graceful shutdown with a request in flight, metrics."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from tests.e2e.conftest import pod_env, write_json
from tests.e2e.faults import log_barrier
from tests.e2e.harness import Daemon, addresses, gated_plugin, run_shim, until_logged
from tests.waits import eventually, until_watched

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
AT_FDCWD = -100  # <fcntl.h>: a path relative to the working directory
RENAME_EXCHANGE = 2  # <linux/fs.h>: renameat2 swaps the two names


def _auto(workdir: Path, conflist: Path, **extra: Any) -> dict[str, Any]:
    """Auto mode: the primary config is the test conflist, the output goes to ``cni``."""
    (workdir / "cni").mkdir(exist_ok=True)
    return {
        "multusConfigFile": "auto",
        "multusAutoconfigDir": str(conflist.parent),
        "cniConfigDir": str(workdir / "cni"),
        "daemonSocketDir": str(workdir / "run"),
        **extra,
    }


async def test_generated_config_drives_the_real_shim(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path,
    conflist_file: Path,
) -> None:  # fmt: skip
    daemon = await start_daemon(**_auto(workdir, conflist_file))
    generated = workdir / "cni" / "00-multus.conf"
    await eventually(generated.exists)
    conf = json.loads(generated.read_text())
    assert conf["type"] == "multus-shim" and conf["name"] == "multus-cni-network"
    assert conf["clusterNetwork"] == str(conflist_file)
    assert conf["daemonSocketDir"] == str(workdir / "run")
    # The runtime reads the generated file and pipes it to the shim, as on a node.
    name = await netns()
    env = pod_env(name)
    added = await run_shim(shim_path, "ADD", generated.read_bytes(), env=env)
    assert added.returncode == 0, added
    assert (await addresses(name))["eth0"]
    assert (await run_shim(shim_path, "DEL", generated.read_bytes(), env=env)).returncode == 0
    assert await daemon.stop() == 0
    assert not generated.exists()  # upstream removes it on shutdown


async def test_regenerated_when_the_primary_changes(
    start_daemon: StartDaemon, workdir: Path, conflist_file: Path
) -> None:
    await start_daemon(**_auto(workdir, conflist_file))
    generated = workdir / "cni" / "00-multus.conf"
    await eventually(generated.exists)
    assert "capabilities" not in json.loads(generated.read_text())
    primary = json.loads(conflist_file.read_text())
    primary["plugins"].append({"type": "portmap", "capabilities": {"portMappings": True}})
    tmp = conflist_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(primary))
    tmp.replace(conflist_file)  # an atomic replace, as network operators do
    await eventually(lambda: "capabilities" in json.loads(generated.read_text()))
    assert json.loads(generated.read_text())["capabilities"] == {"portMappings": True}


async def test_keep_config_on_exit(
    start_daemon: StartDaemon, workdir: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(**_auto(workdir, conflist_file, keepConfigOnExit=True))
    generated = workdir / "cni" / "00-multus.conf"
    await eventually(generated.exists)
    assert await daemon.stop() == 0
    assert generated.exists()


async def test_readiness_indicator_removed_exits_2_and_removes_the_config(
    start_daemon: StartDaemon, workdir: Path, conflist_file: Path
) -> None:
    ready = workdir / "ready" / "primary-ready"
    ready.parent.mkdir()
    ready.write_text("ok")
    daemon = await start_daemon(**_auto(workdir, conflist_file, readinessindicatorfile=str(ready)))
    generated = workdir / "cni" / "00-multus.conf"
    await eventually(generated.exists)
    assert daemon.proc is not None
    await until_watched(ready.parent, daemon.proc.pid)  # the readiness watch is armed
    # A rotation (atomic replace) is not a loss.
    rotated = ready.with_suffix(".new")
    rotated.write_text("ok again")
    rotated.replace(ready)
    # Nor is a swap of its directory for one that holds the file too, and the watch follows
    # it: re-armed on the new directory, it has looked at everything before, the rotation
    # included. (A watch judging a file present shows nothing else outside.)
    swapped = workdir / "ready.next"
    swapped.mkdir()
    (swapped / ready.name).write_text("ok, moved")
    _exchange(swapped, ready.parent)
    await until_watched(ready.parent, daemon.proc.pid)
    assert daemon.proc.returncode is None
    await log_barrier(daemon)  # what the watcher logged so far is in the file (a thread writes)
    assert "is gone; waiting" not in daemon.log(), "a rotation or a swap seen as a loss"
    ready.unlink()  # from the new directory: seen there, so the watch did follow the swap
    assert await asyncio.wait_for(daemon.proc.wait(), 30) == 2
    assert daemon.log().count("is gone; waiting") == 1
    assert not generated.exists()


def _exchange(a: Path, b: Path) -> None:
    """Swap two paths at once (``renameat2`` with ``RENAME_EXCHANGE``): each name is bound at
    every moment, so a watcher never finds either missing."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE):
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), str(a), None, str(b))


async def test_readiness_stat_switch_stalls_requests_instead_of_exiting(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path,
    conflist_file: Path,
) -> None:  # fmt: skip
    """``benchmarkReadinessStat`` (the seed): no watch, so no exit; an ADD waits for the file."""
    ready = workdir / "ready" / "primary-ready"
    ready.parent.mkdir()
    ready.write_text("ok")
    extra = {"readinessindicatorfile": str(ready), "benchmarkReadinessStat": True}
    daemon = await start_daemon(**_auto(workdir, conflist_file, **extra))
    generated = workdir / "cni" / "00-multus.conf"
    await eventually(generated.exists)
    # The daemon said it would not watch the file: nothing stops it when the file goes.
    await until_logged(daemon, f"readiness indicator {ready}: checked by each ADD and CHECK")
    ready.unlink()
    env = pod_env(await netns())
    add = asyncio.create_task(run_shim(shim_path, "ADD", generated.read_bytes(), env=env))
    # The ADD stalls on the missing file (for up to 45 s), with the daemon still serving.
    await until_logged(daemon, f"readiness indicator file {ready} is missing: the request waits")
    assert daemon.proc is not None and daemon.proc.returncode is None
    assert not add.done()
    assert (await daemon.request("GET", "/readyz"))[0] == 200
    ready.write_text("ok")
    added = await asyncio.wait_for(add, 30)
    assert added.returncode == 0, added
    assert (await run_shim(shim_path, "DEL", generated.read_bytes(), env=env)).returncode == 0
    assert await daemon.stop() == 0


async def _readyz_is(daemon: Daemon, status: int) -> bool:
    return (await daemon.request("GET", "/readyz"))[0] == status


async def test_sigterm_lets_an_in_flight_add_finish(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    bin_dir = workdir / "slowbin"
    started, release = workdir / "slow.started", workdir / "slow.release"
    gated_plugin(bin_dir / "slow", started, release)  # runs until the test says so
    delegate = {"cniVersion": "1.0.0", "name": "slow", "type": "slow"}
    daemon = await start_daemon(delegates=[delegate], binDir=str(bin_dir))
    config = {"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus-shim",
              "daemonSocketDir": daemon.socket_dir}  # fmt: skip
    add = asyncio.create_task(run_shim(shim_path, "ADD", config, env=pod_env(await netns())))
    await eventually(started.exists)  # the plugin is running
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    # Draining, the ADD in flight: /readyz says 500 (new ADDs wait for a successor), DELs are
    # still served.
    await until_logged(daemon, "shutdown: waiting up to 10s for 1 request(s) in flight")
    await eventually(lambda: _readyz_is(daemon, 500))
    other = pod_env(await netns())
    status, _ = await daemon.request("GET", "/healthz")
    assert status == 200
    deleted = await run_shim(shim_path, "DEL", config, env=other)
    assert deleted.returncode == 0, deleted
    await until_logged(daemon, "DEL container=" + other["CNI_CONTAINERID"], 10)
    assert not add.done() and daemon.proc.returncode is None  # the drain still waits for it
    release.touch()  # the plugin ends: the ADD finishes, and with it the drain
    added = await add
    assert added.returncode == 0, added
    assert await asyncio.wait_for(daemon.proc.wait(), 30) == 0
    assert not os.path.exists(daemon.socket_path)


async def test_metrics_are_scraped_over_http(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = await start_daemon(clusterNetwork=str(conflist_file), metricsPort=port)
    config = {"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus-shim",
              "daemonSocketDir": daemon.socket_dir}  # fmt: skip
    env = pod_env(await netns())
    assert (await run_shim(shim_path, "ADD", config, env=env)).returncode == 0
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        text = await response.text()
    assert 'multus_server_request_total{code="200",handler="/cni",method="post"} 1.0' in text
    assert 'multus_cni_request_duration_seconds_count{command="ADD",result="ok"} 1.0' in text
    assert "multus_cni_phase_duration_seconds_count" in text
    assert (await run_shim(shim_path, "DEL", config, env=env)).returncode == 0


async def test_static_config_is_installed_in_non_auto_mode(
    start_daemon: StartDaemon, workdir: Path, conflist_file: Path
) -> None:
    static = write_json(workdir / "static" / "05-multus.conf", {"name": "x", "type": "multus-shim"})
    (workdir / "cni").mkdir()
    daemon = await start_daemon(
        clusterNetwork=str(conflist_file),
        multusConfigFile=str(static),
        cniConfigDir=str(workdir / "cni"),
    )
    assert (workdir / "cni" / "05-multus.conf").read_bytes() == static.read_bytes()
    assert (await daemon.request("GET", "/readyz"))[0] == 200  # and it keeps running
