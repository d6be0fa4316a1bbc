"""The hand-written HTTP/1.1 client against a real unix-socket server."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from cni_shim import transport
from tests.unit.cni_shim.shimfakes import FakeDaemon, Request, response


def test_request_bytes_and_content_length_body(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: response(
        200, b'{"Result":{}}', headers={"Content-Type": "text/plain; charset=utf-8"}
    )
    status, headers, body = transport.post(fake_daemon.socket_path, "/cni", b'{"a":1}')
    assert (status, body) == (200, b'{"Result":{}}')
    assert headers["content-type"] == "text/plain; charset=utf-8"
    req = fake_daemon.requests[0]
    assert (req.method, req.path, req.body) == ("POST", "/cni", b'{"a":1}')
    assert req.headers["host"] == "dummy"
    assert req.headers["content-type"] == "application/json"
    assert req.headers["connection"] == "close"
    assert req.headers["content-length"] == "7"


@pytest.mark.parametrize("size", [0, 1, 2047, 2048, 2049, 70000])
def test_chunked_body(fake_daemon: FakeDaemon, size: int) -> None:
    payload = bytes(i % 251 for i in range(size))
    fake_daemon.routes["/cni"] = lambda req: response(200, payload, chunked=True)
    assert transport.post(fake_daemon.socket_path, "/cni", b"")[2] == payload


def test_chunked_with_extensions_and_trailers(fake_daemon: FakeDaemon) -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: y\r\n\r\n"
    )
    fake_daemon.routes["/cni"] = lambda req: raw
    assert transport.post(fake_daemon.socket_path, "/cni", b"")[2] == b"abcde"


def test_body_to_eof(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: response(200, b"until close", length=False)
    assert transport.post(fake_daemon.socket_path, "/cni", b"")[2] == b"until close"


def test_interim_100_continue_skipped(fake_daemon: FakeDaemon) -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + response(201, b"x")
    fake_daemon.routes["/cni"] = lambda req: raw
    assert transport.post(fake_daemon.socket_path, "/cni", b"")[:1] == (201,)


def test_non_200_returned_not_raised(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: response(400, b"bad\n", reason="Bad Request")
    assert transport.post(fake_daemon.socket_path, "/cni", b"")[::2] == (400, b"bad\n")


def test_204_has_no_body(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: b"HTTP/1.1 204 No Content\r\n\r\n"
    assert transport.post(fake_daemon.socket_path, "/cni", b"")[::2] == (204, b"")


def test_connection_refused(short_dir: str) -> None:
    path = str(Path(short_dir) / "multus.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)  # bound but not listening: connect() is refused
    try:
        with pytest.raises(transport.TransportError) as info:
            transport.post(path, "/cni", b"")
    finally:
        s.close()
    assert info.value.errno == errno.ECONNREFUSED
    assert str(info.value) == (
        f'failed to send CNI request: Post "http://dummy/cni": dial unix {path}: '
        "connect: connection refused"
    )


def test_no_such_socket(short_dir: str) -> None:
    path = str(Path(short_dir) / "missing.sock")
    with pytest.raises(transport.TransportError) as info:
        transport.post(path, "/readyz", b"null")
    assert info.value.errno == errno.ENOENT
    assert str(info.value) == (
        f'failed to send CNI request: Post "http://dummy/readyz": dial unix {path}: '
        "connect: no such file or directory"
    )


def test_path_too_long() -> None:
    path = "/tmp/" + "x" * 200
    with pytest.raises(transport.TransportError) as info:
        transport.post(path, "/cni", b"")
    assert info.value.errno == errno.EINVAL
    assert str(info.value).endswith("connect: invalid argument")


def test_closed_without_answer_is_eof(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: None
    with pytest.raises(transport.TransportError) as info:
        transport.post(fake_daemon.socket_path, "/cni", b"{}")
    assert str(info.value) == 'failed to send CNI request: Post "http://dummy/cni": EOF'
    assert info.value.errno is None


def test_truncated_head(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: b"HTTP/1.1 200 OK\r\nContent-Le"
    with pytest.raises(transport.TransportError) as info:
        transport.post(fake_daemon.socket_path, "/cni", b"")
    assert str(info.value) == 'failed to send CNI request: Post "http://dummy/cni": unexpected EOF'


def test_malformed_status_line(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: b"SSH-2.0-nope\r\n\r\n"
    with pytest.raises(transport.TransportError) as info:
        transport.post(fake_daemon.socket_path, "/cni", b"")
    assert str(info.value) == (
        'failed to send CNI request: Post "http://dummy/cni": net/http: HTTP/1.x transport '
        'connection broken: malformed HTTP response "SSH-2.0-nope"'
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n",
    ],
)
def test_truncated_body(fake_daemon: FakeDaemon, raw: bytes) -> None:
    fake_daemon.routes["/cni"] = lambda req: raw
    with pytest.raises(transport.TransportError) as info:
        transport.post(fake_daemon.socket_path, "/cni", b"")
    assert str(info.value) == "failed to read CNI result: unexpected EOF"


def test_bad_chunk_size(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
    )
    with pytest.raises(transport.TransportError) as info:
        transport.post(fake_daemon.socket_path, "/cni", b"")
    assert str(info.value).startswith("failed to read CNI result: malformed chunked encoding")


def _silent_server(path: str, stop: threading.Event) -> threading.Thread:
    """Accepts connections and never answers (a hung daemon) until ``stop`` is set."""
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(8)
    srv.settimeout(0.05)

    def loop() -> None:
        conns: list[socket.socket] = []
        try:
            while not stop.is_set():
                try:
                    conns.append(srv.accept()[0])
                except TimeoutError:
                    continue
        finally:
            for c in conns:
                c.close()
            srv.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_timeout_bounds_the_exchange(short_dir: str) -> None:
    path = str(Path(short_dir) / "multus.sock")
    stop = threading.Event()
    thread = _silent_server(path, stop)
    try:
        with pytest.raises(transport.TransportError) as info:
            transport.post(path, "/readyz", b"null", timeout=0.2)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert info.value.errno == errno.ETIMEDOUT
    assert "Client.Timeout exceeded" in str(info.value)


def test_server_answers_before_reading_body(short_dir: str) -> None:
    """An early 400 + close while we are still sending is still read (no broken-pipe error)."""
    path = str(Path(short_dir) / "multus.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(100)
        conn.sendall(response(400, b"too big\n", reason="Bad Request"))
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        status, _, body = transport.post(path, "/cni", b"x" * (8 << 20))
    except transport.TransportError as exc:
        # The kernel may reset the connection before our read; then the error carries errno.
        assert exc.errno in (errno.EPIPE, errno.ECONNRESET)
    else:
        assert (status, body) == (400, b"too big\n")
    finally:
        t.join(timeout=10)
        srv.close()


def test_records_request_type(fake_daemon: FakeDaemon) -> None:
    transport.post(fake_daemon.socket_path, "/healthz", b"null")
    assert fake_daemon.requests == [
        Request("POST", "/healthz", fake_daemon.requests[0].headers, b"null")
    ]


# --- interop with aiohttp (what multusd's server is built on) ---------------------------------


@pytest.fixture
def aiohttp_daemon(short_dir: str) -> Iterator[str]:
    """A real aiohttp app on a UnixSite, in its own loop/thread (the client blocks)."""
    big = b"x" * 100_000

    async def cni(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.headers.get("Content-Type") != "application/json":
            return web.Response(status=415)
        if body == b"chunked":
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for i in range(0, len(big), 3000):
                await resp.write(big[i : i + 3000])
            await resp.write_eof()
            return resp
        if body == b"error":
            return web.Response(status=400, text="bad thing\n")
        return web.Response(body=b'{"echo":' + body + b"}", content_type="application/json")

    async def readyz(request: web.Request) -> web.Response:
        return web.Response(status=200, content_type="application/json")

    app = web.Application()
    app.router.add_post("/cni", cni)
    app.router.add_route("*", "/readyz", readyz)
    path = str(Path(short_dir) / "multus.sock")
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)

    async def start() -> None:
        await runner.setup()
        await web.UnixSite(runner, path).start()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield path
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def test_aiohttp_content_length(aiohttp_daemon: str) -> None:
    status, headers, body = transport.post(aiohttp_daemon, "/cni", b"[1,2]")
    assert (status, body) == (200, b'{"echo":[1,2]}')
    assert headers["content-type"].startswith("application/json")


def test_aiohttp_chunked(aiohttp_daemon: str) -> None:
    status, headers, body = transport.post(aiohttp_daemon, "/cni", b"chunked")
    assert headers.get("transfer-encoding") == "chunked"
    assert (status, body) == (200, b"x" * 100_000)


def test_aiohttp_error_and_not_found(aiohttp_daemon: str) -> None:
    assert transport.post(aiohttp_daemon, "/cni", b"error")[::2] == (400, b"bad thing\n")
    assert transport.post(aiohttp_daemon, "/nope", b"")[0] == 404
    assert transport.post(aiohttp_daemon, "/readyz", b"null", timeout=5)[0] == 200
