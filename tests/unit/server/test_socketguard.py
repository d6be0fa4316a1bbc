"""server.socket's instance lock and server.socketguard on real sockets, with the real site,
handlers and probes' site: a lost socket file is bound again and served, a path someone else
holds is left alone and reported on ``/healthz``, a second daemon is refused by the lock."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from multusd.cni.invoke import SubprocessExecutor
from multusd.commands.context import Services
from multusd.errors import EXIT_SERVER, StartupError
from multusd.server.handlers import DaemonState, Handlers
from multusd.server.health import health_site
from multusd.server.listener import SocketSite, socket_server
from multusd.server.socket import InstanceLock, bind_socket, lock_name, prepare_socket_dir
from multusd.server.socketguard import SocketGuard


@dataclass
class Rig:
    directory: Path
    guard: SocketGuard
    site: SocketSite
    state: DaemonState
    port: int

    @property
    def path(self) -> str:
        return self.guard.path

    async def healthz(self) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(f"http://127.0.0.1:{self.port}/healthz") as response,
        ):
            return response.status, await response.text()

    async def healthz_over_the_socket(self) -> int:
        connector = aiohttp.UnixConnector(path=self.path)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get("http://dummy/healthz") as response,
        ):
            return response.status


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    directory = Path(tempfile.mkdtemp(prefix="mgrd", dir="/tmp"))  # short: a socket path
    state = DaemonState()
    handlers = Handlers(
        services=Services(executor=SubprocessExecutor()),
        daemon_raw={"cniDir": str(directory / "cache")},
        ignore_readiness=True,
        state=state,
    )
    prepare_socket_dir(str(directory / "run"))
    guard = SocketGuard(bind_socket(str(directory / "run" / "s.sock")))
    try:
        async with (
            socket_server(guard.current.sock, handlers, cancel_timeout=1.0) as site,
            health_site(handlers, 0) as port,
        ):
            yield Rig(directory, guard, site, state, port)
    finally:
        guard.close()
        with contextlib.suppress(OSError):
            os.unlink(directory / "run" / "s.sock")
        with contextlib.suppress(OSError):
            (directory / "run").rmdir()
        directory.rmdir()


async def test_a_removed_socket_is_bound_again_and_served(rig: Rig) -> None:
    before = rig.guard.current
    os.unlink(rig.path)
    os.rmdir(os.path.dirname(rig.path))
    await rig.guard.check(rig.site, rig.state)
    assert rig.guard.current is not before and before.sock.fileno() == -1  # old one closed
    assert (os.stat(os.path.dirname(rig.path)).st_mode & 0o777) == 0o700
    assert (os.lstat(rig.path).st_mode & 0o777) == 0o600
    assert await rig.healthz_over_the_socket() == 200
    await rig.guard.check(rig.site, rig.state)  # ours again: nothing to do
    assert rig.guard.current.sock.fileno() != -1


async def test_a_path_another_process_serves_is_reported_not_taken(rig: Rig) -> None:
    os.unlink(rig.path)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(rig.path)
    other.listen(4)
    theirs = os.lstat(rig.path).st_ino
    try:
        await rig.guard.check(rig.site, rig.state)
        status, body = await rig.healthz()
        assert status == 500 and "another daemon is serving" in body, body
        assert os.lstat(rig.path).st_ino == theirs
    finally:
        other.close()  # a stale socket from now on
    await rig.guard.check(rig.site, rig.state)
    assert rig.state.unreachable == ""
    assert (await rig.healthz())[0] == 200
    assert await rig.healthz_over_the_socket() == 200


async def test_a_file_that_is_not_a_socket_is_left_alone(rig: Rig) -> None:
    os.unlink(rig.path)
    Path(rig.path).write_text("mine")
    await rig.guard.check(rig.site, rig.state)
    assert "is not a socket" in rig.state.unreachable
    rig.guard.current.unlink()  # what the exit does: only our own file is removed
    assert Path(rig.path).read_text() == "mine"


async def test_a_second_holder_of_the_lock_is_refused_naming_the_first(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")  # no file at all: the lock is not a file
    first = InstanceLock.acquire(path)
    first.answer(asyncio.get_running_loop())
    try:
        with pytest.raises(StartupError) as refused:
            InstanceLock.acquire(path)
        assert refused.value.exit_code == EXIT_SERVER
        message = str(refused.value)
        assert f"another daemon is serving {path} (pid {os.getpid()}, " in message, message
        assert f"holding @multusd:{os.path.realpath(path)})" in message, message
    finally:
        first.close()
    InstanceLock.acquire(path).close()  # released with its holder


def test_the_lock_name_is_the_real_path_and_fits(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert lock_name(str(tmp_path / "link" / "s.sock")) == lock_name(
        str(tmp_path / "real" / "s.sock")
    )
    assert lock_name("/run/multus/multus.sock") == b"\0multusd:/run/multus/multus.sock"
    long = lock_name("/" + "d" * 200 + "/multus.sock")
    assert len(long) <= 108 and long.startswith(b"\0multusd:sha256:")
