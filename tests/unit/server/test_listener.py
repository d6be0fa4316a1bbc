"""The unix-socket site on a real socket with the real app, handlers and aiohttp runner: a client
that half-closes is answered, one that closes is cancelled, bodies over the limit get a 413 CNI
error, bad HTTP gets aiohttp's own 400 in one log line, the header timeout, 100-continue, the
probes' methods, a request's arrival time, and what shutdown answers."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from multusd.cni.invoke import SubprocessExecutor
from multusd.commands.context import Services
from multusd.server.handlers import DaemonState, Handlers
from multusd.server.listener import SocketSite, socket_server
from multusd.server.socket import bind_socket
from tests.waits import eventually

CONFIG = base64.b64encode(b'{"cniVersion":"1.0.0","name":"n","type":"multus-shim"}').decode()
LIMIT = 4096
"""``maxRequestBytes`` of the rig."""


class Recorded(dict[Any, float]):
    """The handlers' arrival map, remembering every time a handler read from it."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[float | None] = []

    def get(self, key: Any, default: Any = None) -> Any:
        value = super().get(key, default)
        self.read.append(value)
        return value


@dataclass
class Rig:
    path: str
    handlers: Handlers
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    """Set: a request's turn goes on (before that it is held in its turn, once started)."""
    turns: int = 0
    site: SocketSite | None = None

    async def held_turn(self) -> None:
        """Stands in for a slow command: the benchmark hook runs first in a request's turn."""
        self.turns += 1
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@contextlib.contextmanager
def _socket_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="mlis", dir="/tmp"))  # short: a socket path
    try:
        yield directory
    finally:
        with contextlib.suppress(OSError):
            (directory / "s.sock").unlink()
        directory.rmdir()


@contextlib.asynccontextmanager
async def _serving(**raw: Any) -> AsyncIterator[Rig]:
    """The API served on a fresh socket with the daemon config ``raw`` (over the rig's own)."""
    with _socket_dir() as directory:
        bound = bind_socket(str(directory / "s.sock"))
        handlers = Handlers(
            services=Services(executor=SubprocessExecutor()),
            daemon_raw={
                "cniDir": str(directory / "cache"),
                "requestHeaderTimeoutSeconds": 1,
                "maxRequestBytes": LIMIT,
                **raw,
            },
            ignore_readiness=True,
            state=DaemonState(),
            arrivals=Recorded(),
        )
        the_rig = Rig(bound.path, handlers)
        handlers.readiness_check = the_rig.held_turn
        try:
            async with socket_server(bound.sock, handlers, cancel_timeout=2.0) as site:
                the_rig.site = site
                yield the_rig
        finally:
            bound.unlink()


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    async with _serving() as the_rig:
        yield the_rig


def _add(container: str = "c1") -> bytes:
    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": container,
        "CNI_NETNS": "/nonexistent/netns",
        "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p",
    }
    body = json.dumps({"env": env, "config": CONFIG}).encode()
    head = f"POST /cni HTTP/1.1\r\nHost: dummy\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def _talk(path: str, data: bytes, *, half_close: bool = False) -> bytes:
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(data)
    if half_close:
        writer.write_eof()
    try:
        async with asyncio.timeout(20):
            return await reader.read()
    finally:
        writer.close()


def _split(raw: bytes) -> tuple[int, bytes, bytes]:
    """Status, head and body of a whole answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), head, body


def _cni_error(raw: bytes, status: int = 400) -> dict[str, Any]:
    got, head, body = _split(raw)
    assert got == status, raw
    assert b"Connection: close" in head, raw  # one request per connection
    error: dict[str, Any] = json.loads(body)
    return error


async def test_a_half_closed_client_gets_its_answer_and_the_connection_ends(rig: Rig) -> None:
    rig.release.set()
    raw = await _talk(rig.path, _add(), half_close=True)  # read() returns: the server closed
    assert "error loading netconf" in _cni_error(raw)["msg"]  # the ADD ran to its end
    assert rig.started.is_set() and not rig.cancelled.is_set()


async def test_a_closed_client_cancels_its_request(rig: Rig) -> None:
    _, writer = await asyncio.open_unix_connection(rig.path)
    writer.write(_add())
    await asyncio.wait_for(rig.started.wait(), 10)
    writer.transport.abort()  # what the kernel does for a killed shim
    await asyncio.wait_for(rig.cancelled.wait(), 10)
    await eventually(lambda: not rig.handlers.arrivals, 10)  # the connection is forgotten


async def test_a_body_over_the_limit_is_413_whether_declared_or_chunked(rig: Rig) -> None:
    declared = b"POST /cni HTTP/1.1\r\nHost: d\r\nContent-Length: 10000\r\n\r\n"
    error = _cni_error(await _talk(rig.path, declared), 413)
    assert "request body too large: 10000 bytes, the limit is 4096" in error["msg"], error
    chunk = b"%x\r\n%s\r\n" % (3000, b"y" * 3000)
    chunked = b"POST /cni HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 2
    error = _cni_error(await _talk(rig.path, chunked), 413)
    assert "more than 4096 bytes, the limit is 4096" in error["msg"], error
    assert not rig.started.is_set()


async def test_an_answer_before_the_body_reaches_a_client_still_sending_it(rig: Rig) -> None:
    """Closing a unix socket with unread data resets its peer: the answer must survive that."""
    body = b"z" * 300_000
    head = b"POST /cni HTTP/1.1\r\nHost: d\r\nContent-Length: %d\r\n\r\n" % len(body)
    error = _cni_error(await _talk(rig.path, head + body), 413)
    assert "300000 bytes" in error["msg"], error


async def test_expect_100_continue_is_answered_before_the_body(rig: Rig) -> None:
    reader, writer = await asyncio.open_unix_connection(rig.path)
    writer.write(
        b"POST /cni HTTP/1.1\r\nHost: d\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    )
    async with asyncio.timeout(10):
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"{}")
        raw = await reader.read()
    writer.close()
    assert "unexpected or missing CNI_COMMAND" in _cni_error(raw)["msg"]


@pytest.mark.parametrize(
    ("request_line", "status", "body"),
    [
        (b"GET /healthz", 200, b""),
        (b"POST /readyz", 200, b'{"ready":true,"caches":"serving"}'),
        (b"HEAD /healthz", 405, b""),  # as upstream's shims never send: not routed, head alone
        (b"PUT /healthz", 405, b"Method not allowed\n"),
        (b"GET /cni", 405, b"Method not allowed\n"),
        (b"GET /nope", 404, b""),
    ],
)
async def test_routes_as_upstream(rig: Rig, request_line: bytes, status: int, body: bytes) -> None:
    raw = await _talk(rig.path, request_line + b" HTTP/1.1\r\nHost: d\r\n\r\n")
    got, head, answered = _split(raw)
    assert (got, answered) == (status, body), raw
    assert b"Connection: close" in head


@pytest.mark.parametrize(
    "data",
    [
        b"POST /cni HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"POST /cni HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: br\r\n\r\nxx",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    ],
)
async def test_bad_http_gets_aiohttp_s_400_and_one_log_line(
    rig: Rig, data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        status, head, body = _split(await _talk(rig.path, data))
    assert status == 400 and head.startswith(b"HTTP/1.0 400 Bad Request"), head
    assert b"text/plain" in head and body, body  # aiohttp's reason, not a CNI error object
    assert not rig.started.is_set()
    logged = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert logged and all(r.exc_info is None and "\n" not in r.getMessage() for r in logged)


async def test_a_connection_without_a_whole_head_is_closed_after_the_header_timeout(
    rig: Rig,
) -> None:
    for sent in (b"", b"POST /cni HTTP/1.1\r\nHo"):
        reader, writer = await asyncio.open_unix_connection(rig.path)
        writer.write(sent)
        async with asyncio.timeout(20):
            assert await reader.read() == b""
        writer.close()


async def test_a_request_s_deadline_counts_from_its_arrival() -> None:
    """The second ADD waits unread behind the first (``maxActiveRequests``: 1); the time its
    handler counts from is when it arrived, before the first one ended, not when it was read."""
    async with _serving(maxActiveRequests=1) as rig:
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(_talk(rig.path, _add("a")))
        await asyncio.wait_for(rig.started.wait(), 10)
        second = asyncio.create_task(_talk(rig.path, _add("b")))
        intake = rig.site.intake if rig.site is not None else None
        assert intake is not None
        await eventually(lambda: intake.waiting == 1, 10, what="the second ADD waiting unread")
        assert rig.turns == 1 and len(rig.handlers.arrivals) == 1
        released = loop.time()
        rig.release.set()
        await asyncio.gather(first, second)
        arrivals = rig.handlers.arrivals
        assert isinstance(arrivals, Recorded) and len(arrivals.read) == 2
        read_first, read_second = arrivals.read
        assert read_first is not None and read_second is not None
        assert read_first <= read_second < released
        assert not arrivals  # each entry goes with its connection


async def test_shutdown_answers_a_running_request_and_cancels_its_work() -> None:
    async with _serving() as rig:
        answer = asyncio.create_task(_talk(rig.path, _add()))
        await asyncio.wait_for(rig.started.wait(), 10)
    assert rig.cancelled.is_set()  # cancelled through its queue, before the runner's wait
    error = _cni_error(await answer)
    assert error["code"] == 11 and "shutting down" in error["msg"], error
