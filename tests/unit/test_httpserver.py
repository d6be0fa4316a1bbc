"""``multusd.httpserver`` on real TCP and unix sockets: framing, the answer before the body,
100-continue, the header timeout, and what a vanished client does to its handler."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from multusd.httpserver import BadRequest, HttpConnection, Request, Response, TcpSite

LIMIT = 1024


class Echo:
    """A server whose one handler reads the body (up to ``LIMIT``) and answers its length."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.hold = False

    async def serve(self, request: Request) -> Response:
        self.started.set()
        if self.hold:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if request.path == "/early":
            return Response.text("early\n", 400)  # answered before the body is read
        try:
            body = await request.read(LIMIT)
        except BadRequest as exc:
            return Response.text(f"{exc.text}\n", exc.status)
        return Response.text(f"{request.method} {len(body)} {request.header('X-Test')}\n")


@pytest.fixture
async def echo() -> AsyncIterator[tuple[Echo, int]]:
    handler = Echo()
    site = await TcpSite.listen("127.0.0.1", 0, handler.serve, header_timeout=0.5)
    try:
        yield handler, site.port
    finally:
        await site.close()


async def exchange(port: int, data: bytes, *, half_close: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        if half_close:
            writer.write_eof()
        async with asyncio.timeout(10):
            return await reader.read()
    finally:
        writer.close()


def status_and_body(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"Connection: close" in head, raw
    return int(head.split(b" ")[1]), body


async def test_a_body_of_known_length_and_one_in_chunks(echo: tuple[Echo, int]) -> None:
    _, port = echo
    raw = await exchange(
        port, b"POST /x HTTP/1.1\r\nHost: h\r\nx-test: 1\r\nContent-Length: 3\r\n\r\nabc"
    )
    assert status_and_body(raw) == (200, b"POST 3 1\n")
    head = b"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked = head + b"2\r\nab\r\n1\r\nc\r\n0\r\n\r\n"
    assert status_and_body(await exchange(port, chunked)) == (200, b"POST 3 None\n")


async def test_a_body_over_the_limit_is_413_whether_declared_or_chunked(
    echo: tuple[Echo, int],
) -> None:
    _, port = echo
    declared = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\n"
    status, body = status_and_body(await exchange(port, declared, half_close=False))
    assert status == 413 and b"5000 bytes, the limit is 1024" in body
    chunk = b"%x\r\n%s\r\n" % (2000, b"y" * 2000)
    chunked = b"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk
    status, body = status_and_body(await exchange(port, chunked, half_close=False))
    assert status == 413 and b"more than 1024 bytes" in body


async def test_an_answer_before_the_body_still_reaches_a_client_that_keeps_sending() -> None:
    """Closing with unread data resets a unix socket's peer: the answer must survive that."""
    handler = Echo()
    server_sock, client_sock = socket.socketpair()
    loop = asyncio.get_running_loop()
    await loop.connect_accepted_socket(
        lambda: HttpConnection(handler.serve, header_timeout=5), sock=server_sock
    )
    reader, writer = await asyncio.open_connection(sock=client_sock)
    writer.write(b"POST /early HTTP/1.1\r\nHost: h\r\nContent-Length: 300000\r\n\r\n")
    writer.write(b"z" * 300_000)
    async with asyncio.timeout(10):
        raw = await reader.read()
    writer.close()
    assert status_and_body(raw) == (400, b"early\n")


async def test_expect_100_continue_is_answered_before_the_body(echo: tuple[Echo, int]) -> None:
    _, port = echo
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    )
    async with asyncio.timeout(10):
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"ok")
        raw = await reader.read()
    writer.close()
    assert status_and_body(raw) == (200, b"POST 2 None\n")


async def test_head_gets_the_head_alone(echo: tuple[Echo, int]) -> None:
    _, port = echo
    raw = await exchange(port, b"HEAD /x HTTP/1.1\r\nHost: h\r\n\r\n")
    status, body = status_and_body(raw)
    assert status == 200 and body == b"" and b"Content-Length: 12" in raw


@pytest.mark.parametrize(
    "data",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello: refused before any line
        b"POST /x HTTP/1.1\r\nContent-Length: 1\r\n\r\n",  # no Host
        b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
        b"GET /x HTTP/1.1\r\nHost: h\r\n" + b"X-Long: " + b"a" * 20_000 + b"\r\n\r\n",
    ],
)
async def test_bad_http_is_a_4xx(echo: tuple[Echo, int], data: bytes) -> None:
    handler, port = echo
    status, _ = status_and_body(await exchange(port, data, half_close=False))
    assert 400 <= status < 500
    assert not handler.started.is_set()


async def test_a_silent_connection_is_closed_after_the_header_timeout(
    echo: tuple[Echo, int],
) -> None:
    _, port = echo
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /x HTTP/1.1\r\nHo")
    async with asyncio.timeout(10):
        assert await reader.read() == b""
    writer.close()


async def test_a_client_that_vanishes_cancels_its_handler(echo: tuple[Echo, int]) -> None:
    handler, port = echo
    handler.hold = True
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
    await asyncio.wait_for(handler.started.wait(), 10)
    writer.transport.abort()
    await asyncio.wait_for(handler.cancelled.wait(), 10)


async def test_closing_the_site_cancels_what_is_running() -> None:
    handler = Echo()
    handler.hold = True
    site = await TcpSite.listen("127.0.0.1", 0, handler.serve, header_timeout=5)
    reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
    writer.write(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
    await asyncio.wait_for(handler.started.wait(), 10)
    await site.close()
    await asyncio.wait_for(handler.cancelled.wait(), 10)
    async with asyncio.timeout(10):
        assert await reader.read() == b""
    writer.close()
