"""The h11 client (multusd/k8s/http.py) against real servers: aiohttp.web for ordinary
answers, hand-written asyncio servers for the edge cases (stale keep-alive connections,
close-delimited and malformed answers, resets, silence). Certificates come from the openssl
CLI."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from multusd.k8s.http import Headers, HttpClient, HttpError, Response

# --- servers -----------------------------------------------------------------------------------


async def _echo(request: web.Request) -> web.Response:
    """What the server received, and from which peer port (one port: one connection)."""
    assert request.transport is not None
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path_qs": request.path_qs,
            "headers": [[k, v] for k, v in request.headers.items()],
            "body": body.decode(),
            "peer_port": request.transport.get_extra_info("peername")[1],
        }
    )


async def _chunked(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for piece in (b"alpha ", b"beta ", b"gamma"):
        await resp.write(piece)
        await asyncio.sleep(0.01)
    await resp.write_eof()
    return resp


async def _not_found(request: web.Request) -> web.Response:
    return web.Response(status=404, body=b'{"kind":"Status"}', headers={"Retry-After": "3"})


@contextlib.asynccontextmanager
async def aiohttp_server(
    routes: list[web.RouteDef] | None = None, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[int]:
    app = web.Application()
    app.add_routes(
        [
            web.route("*", "/echo", _echo),
            web.route("*", "/prefix/echo", _echo),
            web.get("/chunked", _chunked),
            web.get("/missing", _not_found),
            *(routes or []),
        ]
    )
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


@dataclass
class Peer:
    """One connection a :class:`RawServer` accepted; ``eof`` is set once :meth:`wait_eof`
    saw the client close it."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    index: int
    eof: asyncio.Event = field(default_factory=asyncio.Event)

    async def read_request(self) -> tuple[bytes, bytes] | None:
        """(head, body) of the next request, None at EOF."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.eof.set()
            return None
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return head, await self.reader.readexactly(length)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def wait_eof(self) -> None:
        """Read (and drop) everything until the client closes the connection."""
        with contextlib.suppress(OSError):
            while await self.reader.read(65536):
                pass
        self.eof.set()


Handler = Callable[[Peer], Awaitable[None]]


class RawServer:
    """An asyncio server running ``handler`` on each connection, which is closed when the
    handler returns; ``peers`` are the connections, in the order they came."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1") -> None:
        self.handler = handler
        self.host = host
        self.peers: list[Peer] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = Peer(reader, writer, len(self.peers))
        self.peers.append(peer)
        try:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                await self.handler(peer)
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 1)
        finally:
            writer.transport.abort()
            self._tasks.discard(task)

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def eofs(self) -> Awaitable[object]:
        """Every connection closed by the client (as seen by ``wait_eof``)."""
        return asyncio.gather(*(peer.eof.wait() for peer in self.peers))


def ok(body: bytes = b"ok", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def keep_alive(answer: bytes = b"") -> Handler:
    """Answer every request with 200 (``answer`` or the default), until the client closes."""

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await peer.send(answer or ok())

    return handler


def client(url: str, **kwargs: object) -> HttpClient:
    options: dict[str, object] = {"ssl_context": None, "headers": {}, "connect_timeout": 2.0}
    options.update(kwargs)
    return HttpClient(url, **options)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def closing(http: HttpClient) -> AsyncIterator[HttpClient]:
    try:
        yield http
    finally:
        await http.close()


def echoed(resp: Response) -> dict[str, object]:
    assert resp.status == 200, resp.body
    data = json.loads(resp.body)
    assert isinstance(data, dict)
    return data


def headers_of(data: dict[str, object]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in data["headers"]:  # type: ignore[attr-defined]
        out.setdefault(name.lower(), []).append(value)
    return out


# --- requests ----------------------------------------------------------------------------------


async def test_get_sends_params_host_and_merged_headers() -> None:
    async with aiohttp_server() as port:
        defaults = {"Accept": "application/json", "User-Agent": "multusd/test"}
        async with closing(client(f"http://127.0.0.1:{port}/", headers=defaults)) as http:
            resp = await http.request(
                "GET",
                "/echo",
                params={"labelSelector": "a=b,c", "watch": "false"},
                headers={"accept": "application/vnd.kubernetes.protobuf", "X-Extra": "1"},
                timeout=5,
            )
            data = echoed(resp)
            assert data["method"] == "GET"
            assert data["path_qs"] == "/echo?labelSelector=a%3Db%2Cc&watch=false"
            got = headers_of(data)
            assert got["host"] == [f"127.0.0.1:{port}"]
            assert got["accept"] == ["application/vnd.kubernetes.protobuf"]
            assert got["user-agent"] == ["multusd/test"]
            assert got["x-extra"] == ["1"]
            assert "accept-encoding" not in got
            assert "content-length" not in got
            assert resp.content_type == "application/json"
            assert resp.headers.get("CONTENT-TYPE", "").startswith("application/json")

            more = echoed(await http.request("GET", "/echo?a=1", params={"b": "2"}, timeout=5))
            assert more["path_qs"] == "/echo?a=1&b=2"


async def test_body_sets_content_length() -> None:
    async with aiohttp_server() as port, closing(client(f"http://127.0.0.1:{port}")) as http:
        for method in ("POST", "PATCH"):
            resp = await http.request(
                method,
                "/echo",
                body=b'{"a": 1}',
                headers={"Content-Type": "application/merge-patch+json"},
                timeout=5,
            )
            data = echoed(resp)
            assert (data["method"], data["body"]) == (method, '{"a": 1}')
            got = headers_of(data)
            assert got["content-length"] == ["8"]
            assert got["content-type"] == ["application/merge-patch+json"]
        empty = echoed(await http.request("POST", "/echo", body=b"", timeout=5))
        assert headers_of(empty)["content-length"] == ["0"]


async def test_error_status_is_an_answer_with_its_headers() -> None:
    async with aiohttp_server() as port, closing(client(f"http://127.0.0.1:{port}")) as http:
        resp = await http.request("GET", "/missing", timeout=5)
        assert (resp.status, resp.body) == (404, b'{"kind":"Status"}')
        assert resp.headers.get("retry-after") == "3"
        assert resp.content_type == "application/octet-stream"  # no Content-Type sent


async def test_path_prefix_of_the_base_url() -> None:
    async with (
        aiohttp_server() as port,
        closing(client(f"http://127.0.0.1:{port}/prefix/")) as http,
    ):
        data = echoed(await http.request("GET", "/echo", params={"x": "y"}, timeout=5))
        assert data["path_qs"] == "/prefix/echo?x=y"


async def test_keep_alive_reuses_one_connection() -> None:
    async with aiohttp_server() as port, closing(client(f"http://127.0.0.1:{port}")) as http:
        first = echoed(await http.request("GET", "/echo", timeout=5))
        second = echoed(await http.request("POST", "/echo", body=b"x", timeout=5))
        third = echoed(await http.request("GET", "/echo", timeout=5))
        assert first["peer_port"] == second["peer_port"] == third["peer_port"]


async def test_head_and_204_have_no_body_and_keep_the_connection() -> None:
    async def handler(peer: Peer) -> None:
        while (req := await peer.read_request()) is not None:
            if req[0].startswith(b"HEAD "):
                await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
            else:
                await peer.send(b"HTTP/1.1 204 No Content\r\n\r\n")

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        head = await http.request("HEAD", "/", timeout=5)
        assert (head.status, head.body, head.headers["content-length"]) == (200, b"", "10")
        empty = await http.request("DELETE", "/", timeout=5)
        assert (empty.status, empty.body) == (204, b"")
        assert len(server.peers) == 1


async def test_informational_responses_are_skipped() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"done")
    async with RawServer(keep_alive(answer)) as server, closing(client(server.url())) as http:
        resp = await http.request("POST", "/", body=b"x", timeout=5)
        assert (resp.status, resp.body) == (200, b"done")


async def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok(b"once"))  # keep-alive announced, connection closed anyway

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        assert (await http.request("GET", "/", timeout=5)).body == b"once"
        await asyncio.sleep(0.05)  # the FIN arrives while the connection is idle
        assert (await http.request("GET", "/", timeout=5)).body == b"once"
        assert len(server.peers) == 2


async def test_a_reused_connection_closed_under_the_request_is_retried_once() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok(b"fresh" if peer.index else b"first"))
        if peer.index == 0:
            second.append(await peer.read_request())  # then hang up without a word

    second: list[tuple[bytes, bytes] | None] = []
    async with RawServer(handler) as server, closing(client(server.url())) as http:
        assert (await http.request("GET", "/", timeout=5)).body == b"first"
        resp = await http.request("PATCH", "/", body=b"{}", timeout=5)
        assert resp.body == b"fresh"
        assert second[0] is not None and second[0][0].startswith(b"PATCH ")
        assert len(server.peers) == 2


async def test_no_retry_when_the_fresh_connection_fails_too() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        if peer.index == 0:
            await peer.send(ok())
            await peer.read_request()

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        await http.request("GET", "/", timeout=5)
        with pytest.raises(HttpError, match="without a response"):
            await http.request("GET", "/", timeout=5)
        assert len(server.peers) == 2  # the reused one, then one fresh attempt, no more


async def test_no_retry_on_a_fresh_connection() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        with pytest.raises(HttpError, match="without a response"):
            await http.request("GET", "/", timeout=5)
        assert len(server.peers) == 1


async def test_no_retry_once_part_of_the_answer_came() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok())
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Le")

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        await http.request("GET", "/", timeout=5)
        with pytest.raises(HttpError, match="unexpectedly closed"):
            await http.request("GET", "/", timeout=5)
        assert len(server.peers) == 1


async def test_connection_close_answer_is_not_pooled() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok(b"bye", b"Connection: close\r\n"))
        await peer.wait_eof()  # the client must close it

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        assert (await http.request("GET", "/", timeout=5)).body == b"bye"
        await asyncio.wait_for(server.peers[0].eof.wait(), 2)
        assert (await http.request("GET", "/", timeout=5)).body == b"bye"
        assert len(server.peers) == 2


async def test_chunked_answer() -> None:
    async with aiohttp_server() as port, closing(client(f"http://127.0.0.1:{port}")) as http:
        resp = await http.request("GET", "/chunked", timeout=5)
        assert resp.headers.get("Transfer-Encoding") == "chunked"
        assert (resp.status, resp.body) == (200, b"alpha beta gamma")
        assert resp.content_type == "text/plain"
        echoed(await http.request("GET", "/echo", timeout=5))  # the connection is still fine


async def test_close_delimited_answer() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.0 200 OK\r\nContent-Type: Text/Plain; charset=x\r\n\r\nall ")
        await asyncio.sleep(0.02)
        await peer.send(b"of it")

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        for _ in range(2):
            resp = await http.request("GET", "/", timeout=5)
            assert (resp.body, resp.content_type) == (b"all of it", "text/plain")
        assert len(server.peers) == 2


async def test_total_timeout_and_the_connection_is_dropped() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        if peer.index == 1:
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nsome")  # then silence
        await peer.wait_eof()

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        for _ in range(2):  # silent before the head, then in the middle of the body
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await http.request("GET", "/", timeout=0.2)
            assert 0.15 < time.monotonic() - started < 1.5
        await asyncio.wait_for(server.eofs(), 2)
        assert len(server.peers) == 2


async def test_connect_timeout() -> None:
    # A listener that never accepts, its backlog full: the kernel drops further SYNs.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    try:
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        async with closing(client(f"http://127.0.0.1:{port}", connect_timeout=0.2)) as http:
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await http.request("GET", "/", timeout=5)
            assert 0.15 < time.monotonic() - started < 1.5
    finally:
        for sock in (*fillers, listener):
            sock.close()


async def test_cancelled_request_does_not_pool_its_connection() -> None:
    seen = asyncio.Event()

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        seen.set()
        await peer.wait_eof()

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        task = asyncio.create_task(http.request("GET", "/", timeout=5))
        await seen.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(server.eofs(), 2)


async def test_malformed_answer() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"SPDY/9 banana\r\n\r\n")
        await peer.wait_eof()

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        with pytest.raises(HttpError, match="bad response"):
            await http.request("GET", "/", timeout=5)
        await asyncio.wait_for(server.eofs(), 2)


async def test_closed_in_the_middle_of_the_body() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten..")

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        with pytest.raises(HttpError, match="bad response"):
            await http.request("GET", "/", timeout=5)


async def test_reset_in_the_middle_of_the_body() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nonly ten..\r\n")
        await asyncio.sleep(0.05)
        sock = peer.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.writer.transport.abort()  # linger 0: RST

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        with pytest.raises((ConnectionResetError, HttpError)):
            await http.request("GET", "/", timeout=5)


async def test_idle_pool_is_bounded() -> None:
    both = asyncio.Event()
    arrived = 0

    async def handler(peer: Peer) -> None:
        nonlocal arrived
        while await peer.read_request() is not None:
            arrived += 1
            if arrived == 2:
                both.set()
            await both.wait()  # both requests in flight at once: two connections
            await peer.send(ok())

    async with RawServer(handler) as server, closing(client(server.url(), max_idle=1)) as http:
        await asyncio.gather(*(http.request("GET", "/", timeout=5) for _ in range(2)))
        assert len(server.peers) == 2
        closed = [asyncio.ensure_future(peer.eof.wait()) for peer in server.peers]
        done, pending = await asyncio.wait(closed, timeout=0.5)
        assert len(done) == 1  # the one the pool had no room for
        for task in pending:
            task.cancel()


async def test_close_closes_idle_connections_and_the_client() -> None:
    async with RawServer(keep_alive()) as server:
        http = client(server.url())
        await http.request("GET", "/", timeout=5)
        await http.request("GET", "/", timeout=5)
        assert len(server.peers) == 1 and not server.peers[0].eof.is_set()
        await http.close()
        await asyncio.wait_for(server.eofs(), 2)
        with pytest.raises(RuntimeError):
            await http.request("GET", "/", timeout=5)


async def test_ipv6_literal_host_header() -> None:
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    seen: list[bytes] = []

    async def handler(peer: Peer) -> None:
        req = await peer.read_request()
        assert req is not None
        seen.append(req[0])
        await peer.send(ok())

    async with RawServer(handler, "::1") as server, closing(client(server.url())) as http:
        await http.request("GET", "/x", timeout=5)
        assert f"\r\nHost: [::1]:{server.port}\r\n".encode() in seen[0]


def test_headers_view() -> None:
    headers = Headers([("content-type", "a/b"), ("warning", "1"), ("Warning", "2")])
    assert headers.get("Content-Type") == "a/b"
    assert headers["WARNING"] == "1"
    assert headers.getall("warning") == ["1", "2"]
    not_a_name: object = 3
    assert "Warning" in headers and "nope" not in headers and not_a_name not in headers
    assert headers.get("nope") is None and headers.get("nope", "x") == "x"
    assert sorted(headers) == ["content-type", "warning"] and len(headers) == 2
    with pytest.raises(KeyError):
        headers["nope"]


def test_bad_base_url() -> None:
    with pytest.raises(ValueError, match="not an http"):
        client("unix:///run/x.sock")


# --- streams -----------------------------------------------------------------------------------


async def test_stream_reads_chunks_as_they_come() -> None:
    proceed = asyncio.Event()

    async def watch(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for n in range(3):
            await resp.write(b'{"n": %d}\n' % n)
            await asyncio.wait_for(proceed.wait(), 2)  # the next only once this one was read
            proceed.clear()
        await resp.write_eof()
        return resp

    got: list[bytes] = []
    async with (
        aiohttp_server([web.get("/watch", watch)]) as port,
        closing(client(f"http://127.0.0.1:{port}")) as http,
        http.stream("GET", "/watch", params={"watch": "1"}, read_timeout=2) as resp,
    ):
        assert (resp.status, resp.content_type) == (200, "application/json")
        assert resp.headers.get("transfer-encoding") == "chunked"
        async for chunk in resp.iter_chunks():
            got.append(chunk)
            proceed.set()
    assert got == [b'{"n": 0}\n', b'{"n": 1}\n', b'{"n": 2}\n']


async def test_stream_of_an_error_answer_is_read_whole() -> None:
    async with (
        aiohttp_server() as port,
        closing(client(f"http://127.0.0.1:{port}")) as http,
        http.stream("GET", "/missing", read_timeout=2) as resp,
    ):
        assert resp.status == 404
        assert resp.headers.get("Retry-After") == "3"
        assert await resp.read() == b'{"kind":"Status"}'
        assert await resp.read() == b""  # the end already came: no waiting for more


async def test_stream_read_timeout_on_silence() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        if peer.index == 1:
            await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n")
        await peer.wait_eof()

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        with pytest.raises(TimeoutError):  # no head within read_timeout
            async with http.stream("GET", "/", read_timeout=0.2):
                pass
        async with http.stream("GET", "/", read_timeout=0.2) as resp:
            chunks = resp.iter_chunks()
            assert await anext(chunks) == b"one"
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await anext(chunks)
            assert 0.15 < time.monotonic() - started < 1.5
        await asyncio.wait_for(server.eofs(), 2)


async def test_stream_has_its_own_connection_closed_on_exit() -> None:
    async def handler(peer: Peer) -> None:
        while (req := await peer.read_request()) is not None:
            if b"watch" in req[0]:
                await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n")
                await peer.wait_eof()
                return
            await peer.send(ok())

    async with RawServer(handler) as server, closing(client(server.url())) as http:
        await http.request("GET", "/", timeout=5)
        async with http.stream("GET", "/", params={"watch": "true"}, read_timeout=2) as resp:
            async for chunk in resp.iter_chunks():
                assert chunk == b"x"
                break  # leave the watch in the middle of its body
        await asyncio.wait_for(server.peers[1].eof.wait(), 2)
        await http.request("GET", "/", timeout=5)
        assert len(server.peers) == 2  # the requests shared one, the stream had its own
        assert not server.peers[0].eof.is_set()


# --- TLS ---------------------------------------------------------------------------------------


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("http-pki")
    cert, key = _self_signed(d, "server")
    other, _ = _self_signed(d, "other")
    return {"cert": cert, "key": key, "other": other}


async def test_https_verified_against_its_ca(pki: dict[str, Path]) -> None:
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(pki["cert"], pki["key"])
    good = ssl.create_default_context(cafile=str(pki["cert"]))
    wrong = ssl.create_default_context(cafile=str(pki["other"]))
    async with aiohttp_server(ssl_context=server_side) as port:
        async with closing(client(f"https://127.0.0.1:{port}", ssl_context=good)) as http:
            first = echoed(await http.request("GET", "/echo", timeout=5))
            second = echoed(await http.request("GET", "/echo", timeout=5))
            assert first["peer_port"] == second["peer_port"]
            assert headers_of(first)["host"] == [f"127.0.0.1:{port}"]
            async with http.stream("GET", "/chunked", read_timeout=2) as resp:
                assert await resp.read() == b"alpha beta gamma"
        async with closing(client(f"https://127.0.0.1:{port}", ssl_context=wrong)) as http:
            with pytest.raises(ssl.SSLCertVerificationError):
                await http.request("GET", "/echo", timeout=5)
