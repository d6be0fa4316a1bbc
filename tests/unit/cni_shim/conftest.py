"""Fixtures for the shim tests: a fake daemon on a real unix socket, short socket dirs."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Iterator

import pytest

from tests.unit.cni_shim.shimfakes import FakeDaemon, ok


@pytest.fixture
def fake_daemon() -> Iterator[FakeDaemon]:
    socket_dir = tempfile.mkdtemp(dir="/tmp", prefix="shim")
    daemon = FakeDaemon(socket_dir, routes={"/readyz": ok, "/healthz": ok})
    loop = asyncio.new_event_loop()
    started = threading.Event()
    server: list[asyncio.base_events.Server] = []

    async def start() -> None:
        server.append(await asyncio.start_unix_server(daemon._handle, daemon.socket_path))
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield daemon
    finally:

        async def stop() -> None:
            server[0].close()
            await server[0].wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture
def short_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(dir="/tmp", prefix="shim")
    yield d
    shutil.rmtree(d, ignore_errors=True)
