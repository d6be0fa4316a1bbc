"""The unix-socket site on a real socket with the real app and handlers: a client that
half-closes is answered, one that closes is cancelled, bad HTTP gets a CNI error object."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from multusd.cni.invoke import SubprocessExecutor
from multusd.commands.context import Services
from multusd.server.app import build_app
from multusd.server.handlers import DaemonState, Handlers
from multusd.server.listener import SocketServer
from multusd.server.socket import bind_socket

CONFIG = base64.b64encode(b'{"cniVersion":"1.0.0","name":"n","type":"multus-shim"}').decode()


class Rig:
    def __init__(self, path: str) -> None:
        self.path = path
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def slow_start(self) -> None:
        """Stands in for a slow command: the benchmark hook runs first in a request's turn."""
        self.started.set()
        try:
            await asyncio.sleep(0.5)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    directory = Path(tempfile.mkdtemp(prefix="mlis", dir="/tmp"))
    bound = bind_socket(str(directory / "s.sock"))
    the_rig = Rig(bound.path)
    handlers = Handlers(
        services=Services(executor=SubprocessExecutor()),
        daemon_raw={"cniDir": str(directory / "cache"), "requestHeaderTimeoutSeconds": 2},
        ignore_readiness=True,
        state=DaemonState(),
        readiness_check=the_rig.slow_start,
    )
    server = SocketServer(bound.sock, build_app(handlers), handlers)
    server.start()
    try:
        yield the_rig
    finally:
        await server.close(2.0)
        bound.unlink()
        with contextlib.suppress(OSError):
            (directory / "s.sock").unlink()
        directory.rmdir()


def _add(env: dict[str, str] | None = None) -> bytes:
    env = env or {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "c1",
        "CNI_NETNS": "/nonexistent/netns",
        "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p",
    }
    body = json.dumps({"env": env, "config": CONFIG}).encode()
    head = f"POST /cni HTTP/1.1\r\nHost: dummy\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def _talk(path: str, data: bytes, *, half_close: bool) -> bytes:
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(data)
    if half_close:
        writer.write_eof()
    try:
        async with asyncio.timeout(20):
            return await reader.read()
    finally:
        writer.close()


async def test_a_half_closed_client_gets_its_answer_and_the_connection_ends(rig: Rig) -> None:
    raw = await _talk(rig.path, _add(), half_close=True)  # read() returns: the server closed
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), raw
    assert "error loading netconf" in json.loads(body)["msg"]  # the ADD ran to its end
    assert rig.started.is_set() and not rig.cancelled.is_set()


async def test_a_closed_client_cancels_its_request(rig: Rig) -> None:
    _, writer = await asyncio.open_unix_connection(rig.path)
    writer.write(_add())
    await asyncio.wait_for(rig.started.wait(), 10)
    writer.transport.abort()  # what the kernel does for a killed shim
    await asyncio.wait_for(rig.cancelled.wait(), 10)


@pytest.mark.parametrize(
    "data",
    [
        b"POST /cni HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"POST /cni HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: br\r\n\r\nxx",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    ],
)
async def test_bad_http_gets_a_cni_error_object(rig: Rig, data: bytes) -> None:
    raw = await _talk(rig.path, data, half_close=False)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"400", raw
    error = json.loads(body)
    assert error["code"] == 6 and error["msg"].startswith("bad HTTP request: "), error


async def test_an_idle_connection_is_closed_after_the_header_timeout(rig: Rig) -> None:
    reader, writer = await asyncio.open_unix_connection(rig.path)
    async with asyncio.timeout(20):
        assert await reader.read() == b""
    writer.close()
