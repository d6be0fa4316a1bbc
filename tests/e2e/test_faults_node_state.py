"""The daemon's files on the node changed under it while it serves, and the signals that end it.

* ``socketDir`` removed: the daemon binds its socket again and the shim reaches it; a path
  another process serves is never taken, and ``/healthz`` says so (500) until it is free.
* A second daemon for the same socket is refused while the first lives, its file gone or not.
* SIGHUP and SIGQUIT end the daemon as SIGTERM does: drained, ``00-multus.conf`` removed (with
  ``keepConfigOnExit: false``), no socket left, exit 0.
* The conf dir removed and brought back gets ``00-multus.conf`` again, without the primary
  being touched.

Waits are on the condition itself (``tests.waits``, the daemon's log), never on time.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import bridge_plugin, pod_env, shim_config, write_json
from tests.e2e.harness import Daemon, free_port, http_get, run_shim, until_logged
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]


def _inode(path: str) -> int | None:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return None


# --- the socket -----------------------------------------------------------------------------


async def test_a_removed_socket_dir_is_made_again_and_served(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    first = _inode(daemon.socket_path)
    shutil.rmtree(daemon.socket_dir)
    await until_logged(daemon, "was removed or replaced")
    assert _inode(daemon.socket_path) not in (None, first)
    assert stat.S_IMODE(os.stat(daemon.socket_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(daemon.socket_path).st_mode) == 0o600
    env = pod_env(await netns())
    config = shim_config(daemon)
    added = await run_shim(shim_path, "ADD", config, env=env)
    assert added.returncode == 0, (added, daemon.log())
    deleted = await run_shim(shim_path, "DEL", config, env=env)
    assert deleted.returncode == 0, (deleted, daemon.log())
    assert daemon.log().count("was removed or replaced") == 1
    assert await daemon.stop() == 0
    assert not os.path.exists(daemon.socket_path)


async def test_a_path_another_process_serves_is_not_taken_and_healthz_says_so(
    start_daemon: StartDaemon, conflist_file: Path
) -> None:
    port = free_port()
    daemon = await start_daemon(clusterNetwork=str(conflist_file), healthPort=port)

    async def unhealthy() -> str | None:
        status, body = await http_get(port, "/healthz")
        return body if status == 500 else None

    os.unlink(daemon.socket_path)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        other.bind(daemon.socket_path)
        other.listen(8)
        theirs = _inode(daemon.socket_path)
        body = await eventually(unhealthy, what="/healthz 500 on healthPort")
        assert "cannot be bound again" in body and "another daemon is serving" in body, body
        assert (await http_get(port, "/readyz"))[0] == 500
        assert _inode(daemon.socket_path) == theirs  # not taken
    finally:
        other.close()  # its file stays: a stale socket now, which the daemon may replace
    await until_logged(daemon, "reachable again")
    assert (await http_get(port, "/healthz"))[0] == 200
    assert (await daemon.request("GET", "/healthz"))[0] == 200
    assert daemon.log().count("cannot be bound again") == 1  # logged once, not every second


async def test_a_file_that_is_not_a_socket_is_left_alone(
    start_daemon: StartDaemon, conflist_file: Path
) -> None:
    port = free_port()
    daemon = await start_daemon(clusterNetwork=str(conflist_file), healthPort=port)
    os.unlink(daemon.socket_path)
    Path(daemon.socket_path).write_text("an operator's file")
    await until_logged(daemon, "is not a socket")
    assert (await http_get(port, "/healthz"))[0] == 500
    assert await daemon.stop() == 0
    assert Path(daemon.socket_path).read_text() == "an operator's file"


async def test_a_second_daemon_is_refused_while_the_first_lives_even_without_its_socket_file(
    start_daemon: StartDaemon, workdir: Path, conflist_file: Path
) -> None:
    first = await start_daemon(clusterNetwork=str(conflist_file))
    assert first.proc is not None
    shutil.rmtree(first.socket_dir)
    Path(first.socket_dir).write_text("")  # a file where the directory was: no socket for now
    await until_logged(first, "cannot be bound again")
    assert not os.path.exists(first.socket_path)
    second = Daemon(workdir / "second", dict(first.config))
    second.workdir.mkdir()
    await second.start(wait=False)
    assert second.proc is not None
    assert await asyncio.wait_for(second.proc.wait(), 60) == 3, second.log()
    log = second.log()
    assert f"another daemon is serving {first.socket_path}" in log, log
    assert f"pid {first.proc.pid}, holding @multusd:{first.socket_path}" in log, log
    os.unlink(first.socket_dir)  # the first makes its directory and socket again
    await until_logged(first, "reachable again")
    assert (await first.request("GET", "/healthz"))[0] == 200


# --- signals --------------------------------------------------------------------------------


def _auto(workdir: Path, conf_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "multusConfigFile": "auto",
        "multusAutoconfigDir": str(conf_dir),
        "cniConfigDir": str(conf_dir),
        "daemonSocketDir": str(workdir / "run"),
        **extra,
    }


def _primary(directory: Path, workdir: Path, bridge: str) -> Path:
    return write_json(
        directory / "10-primary.conflist",
        {"cniVersion": "1.0.0", "name": "primary", "plugins": [bridge_plugin(bridge, workdir)]},
    )


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT], ids=["SIGHUP", "SIGQUIT"])
async def test_sighup_and_sigquit_shut_down_like_sigterm(
    start_daemon: StartDaemon, workdir: Path, bridge_name: str, sig: signal.Signals
) -> None:
    conf_dir = workdir / "netd"
    _primary(conf_dir, workdir, bridge_name)
    daemon = await start_daemon(**_auto(workdir, conf_dir, keepConfigOnExit=False))
    generated = conf_dir / "00-multus.conf"
    await eventually(generated.exists, what="00-multus.conf")
    assert await daemon.stop(sig) == 0, daemon.log()
    assert f"received {sig.name}: shutting down" in daemon.log()
    assert "shutdown complete" in daemon.log()
    assert not generated.exists()
    assert not os.path.exists(daemon.socket_path)


# --- the conf dir ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["renamed-into-place", "remade-at-once", "apart"])
async def test_a_conf_dir_removed_and_brought_back_gets_00_multus_conf_again(
    start_daemon: StartDaemon, workdir: Path, bridge_name: str, how: str
) -> None:
    """The deployed layout (the primary beside ``00-multus.conf``): the directory comes back
    whole, renamed into place with the primary already in it; or removed and made again at
    once, the primary copied back (ext4 gives the new directory the old one's inode number),
    after which the watch must still see the primary change. ``apart``: ``cniConfigDir`` is
    another directory, removed and made again empty, twice (the first time may fall in the
    watch's first tick, which syncs anyway)."""
    auto = workdir / "netd"
    primary = _primary(auto, workdir, bridge_name)
    out = workdir / "out" if how == "apart" else auto
    out.mkdir(exist_ok=True)
    await start_daemon(**_auto(workdir, auto, cniConfigDir=str(out)))
    generated = out / "00-multus.conf"
    await eventually(generated.exists, what="00-multus.conf")
    want = generated.read_bytes()
    backup = workdir / "primary.bak"
    shutil.copy2(primary, backup)
    for _ in range(2 if how == "apart" else 1):
        if how == "renamed-into-place":
            staged = workdir / "netd.new"
            staged.mkdir()
            shutil.copy2(backup, staged / primary.name)
            shutil.rmtree(auto)
            os.rename(staged, auto)
        elif how == "remade-at-once":
            shutil.rmtree(auto)
            auto.mkdir()
            shutil.copy2(backup, primary)
        else:
            shutil.rmtree(out)
            out.mkdir()
        touched = os.stat(primary).st_mtime_ns
        await eventually(lambda: generated.exists() and generated.read_bytes() == want)
        assert os.stat(primary).st_mtime_ns == touched  # the primary was not touched since
    if how == "remade-at-once":  # and the watch is on the new directory
        doc = json.loads(backup.read_text())
        doc["plugins"][0]["capabilities"] = {"portMappings": True}
        write_json(primary, doc)
        await eventually(lambda: generated.read_bytes() != want, what="a regeneration")
