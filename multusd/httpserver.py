"""HTTP/1.1 for the daemon's listeners, on h11: one request per connection, answered, closed.

Why not aiohttp's server: the daemon runs under upstream's 50 Mi limit with its plugins and the
pods' interfaces charged to the same cgroup, and importing aiohttp costs it 12 MiB of anonymous
memory (README.md, "Dependencies"; ``python -m bench.deps layers``). What the daemon's listeners
need is small: a request line, headers, a body of known length (or chunks), one answer, and
close (upstream's server disables keep-alive too). h11 (0.5 MiB) parses; this module is the
asyncio glue, with the rules a node daemon needs and a web framework does not have:

* **a closed connection cancels its handler** (the runtime killed the shim: its plugins are
  killed, an ADD rolls back), while a peer that only shut down its write side
  (``shutdown(SHUT_WR)``, Go's ``CloseWrite``) still gets its answer: ``hung_up`` tells the two
  apart when the end of its data arrives (``server.listener`` passes the unix-socket test);
* **a header timeout**: a connection that has not sent a whole request head within
  ``header_timeout`` of opening is closed (an idle and a slow-header timeout in one);
* **bad HTTP is answered**, by ``bad_request`` (the CNI error object the API answers with), and
  logged in one line, never with a traceback;
* **an answer given before the body was read** (too large, too slow) half-closes the connection
  and discards what still arrives for :data:`LINGER` seconds before closing: closing a socket
  with unread data makes the kernel reset it, and the client would lose the answer.

Request bodies are taken as sent: ``Content-Encoding`` is not decoded (Go's server does not
decode it either), so a compressed body fails as the undecodable JSON it is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

import h11

log = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024
"""Bytes a request line and its headers may take (aiohttp's limit: 8,190 per line and field)."""
LINGER = 0.5
"""Seconds a connection answered before its body was read is drained before it closes (Go's
server waits as long)."""
PAUSE_ABOVE = 256 * 1024
"""Bytes buffered past the head while nobody reads the body, before the socket is left unread."""

REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 413: "Request Entity Too Large",
    431: "Request Header Fields Too Large", 500: "Internal Server Error",
}  # fmt: skip


class BadRequest(Exception):
    """The request cannot be read: ``status`` (4xx) and what was wrong."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status if 400 <= status < 500 else 400
        self.text = " ".join(text.split())


class BodyTooLarge(BadRequest):
    """The body is longer than the server takes: HTTP 413."""

    def __init__(self, limit: int, size: int, *, known: bool) -> None:
        actual = f"{size} bytes" if known else f"more than {limit} bytes"
        super().__init__(413, f"{actual}, the limit is {limit} (maxRequestBytes)")
        self.status = 413


@dataclass(frozen=True, slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def text(
        cls,
        text: str,
        status: int = 200,
        *,
        media: str = "text/plain",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> Response:
        return cls(status, text.encode("utf-8", "replace"), f"{media}; charset=utf-8", headers)

    def encode(self, *, head_only: bool = False) -> bytes:
        """The whole answer on the wire; every answer closes its connection."""
        lines = [f"HTTP/1.1 {self.status} {REASONS.get(self.status, '')}".rstrip()]
        if self.content_type is not None:
            lines.append(f"Content-Type: {self.content_type}")
        lines.append(f"Content-Length: {len(self.body)}")
        lines.append(time.strftime("Date: %a, %d %b %Y %H:%M:%S GMT", time.gmtime()))
        lines.append("Connection: close")
        lines.extend(f"{name}: {value}" for name, value in self.headers)
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        return head if head_only else head + self.body


class Request:
    """One request: its head, and its body read on demand (:meth:`read`)."""

    __slots__ = ("_connection", "arrived", "headers", "method", "path", "query")

    def __init__(
        self, event: h11.Request, connection: HttpConnection, arrived: float | None
    ) -> None:
        self.method = event.method.decode("ascii", "replace")
        target = event.target.decode("latin-1")
        self.path, _, self.query = target.partition("?")
        self.headers: dict[str, str] = {}
        for name, value in event.headers:  # h11 lower-cases names; the first value counts
            self.headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        self.arrived = arrived
        """When the request arrived (loop time), waiting unread included, or ``None``."""
        self._connection = connection

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    async def read(self, limit: int) -> bytes:
        """The whole body; :class:`BodyTooLarge` past ``limit`` bytes, :class:`BadRequest` for
        broken framing or a peer that left half-way."""
        return await self._connection.read_body(self, limit)


Serve = Callable[[Request], Awaitable[Response]]
BadRequestAnswer = Callable[[BadRequest], Response]
HungUp = Callable[[asyncio.BaseTransport], bool]


def _always(_transport: asyncio.BaseTransport) -> bool:
    return True


_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_LONGEST_METHOD = 32


def _cannot_start_a_request(buffered: bytes) -> bool:
    """Whether bytes that are not yet a whole request line can never become one: a method is a
    token, followed by a space. h11 only looks at a line once it is whole, so a TLS hello or
    binary garbage would otherwise wait for the header timeout instead of getting its 400."""
    method, space, _ = buffered.lstrip(b"\r\n")[: _LONGEST_METHOD + 1].partition(b" ")
    return any(c not in _TOKEN for c in method) or (not space and len(method) > _LONGEST_METHOD)


def plain_error(error: BadRequest) -> Response:
    """The answer to bad HTTP on a listener with no error format of its own."""
    return Response.text(f"{error.text}\n", error.status)


class HttpConnection(asyncio.Protocol):
    """One connection: read a request head, run ``serve`` as a task, write its answer, close."""

    def __init__(
        self,
        serve: Serve,
        bad_request: BadRequestAnswer = plain_error,
        *,
        header_timeout: float,
        hung_up: HungUp = _always,
        arrived: float | None = None,
        on_end: Callable[[], None] | None = None,
        live: set[HttpConnection] | None = None,
    ) -> None:
        self._serve = serve
        self._bad_request = bad_request
        self._header_timeout = header_timeout
        self._hung_up = hung_up
        self._arrived = arrived
        self._on_end = on_end
        self._live = live
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        """The request's handler, once its head has arrived."""
        self._more: asyncio.Future[None] | None = None
        self._paused = False
        self._answered = False
        self._continued = False
        self._lost = False

    # --- asyncio's callbacks ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport subclasses, so no isinstance).
        self._transport = cast(asyncio.Transport, transport)
        if self._live is not None:
            self._live.add(self)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._header_timeout, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return  # lingering: what still arrives is dropped
        self._h11.receive_data(data)
        if self.task is None:
            self._next_head()
            return
        self._wake()
        if self._more is None and len(self._h11.trailing_data[0]) > PAUSE_ABOVE:
            self._pause(True)

    def eof_received(self) -> bool:
        if self._answered:
            return False
        self._h11.receive_data(b"")
        if self.task is None:
            self._next_head()
        self._wake()
        if self.task is None or self.task.done() or self._transport is None:
            return False
        # Gone: close, which cancels the handler. Half-closed: stay open for the answer.
        return not self._hung_up(self._transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lost = True
        if self._timer is not None:
            self._timer.cancel()
        if self.task is not None and not self._answered:
            self.task.cancel()  # the client is gone: so is its request
        self._wake()
        if self._live is not None:
            self._live.discard(self)
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end()

    # --- the request --------------------------------------------------------------------------

    def _next_head(self) -> None:
        try:
            event = self._h11.next_event()
        except h11.RemoteProtocolError as exc:
            self._reject(BadRequest(exc.error_status_hint, str(exc) or type(exc).__name__))
            return
        if event is h11.NEED_DATA:
            if _cannot_start_a_request(bytes(self._h11.trailing_data[0])):
                self._reject(BadRequest(400, "invalid method: not an HTTP request"))
            return
        if not isinstance(event, h11.Request):  # the peer left before a request
            self.close()
            return
        if len(event.target) + sum(len(n) + len(v) for n, v in event.headers) > MAX_HEAD:
            # h11 bounds only a head still arriving; one that came in one read is bounded here.
            self._reject(BadRequest(431, f"the request head is over {MAX_HEAD} bytes"))
            return
        if self._timer is not None:
            self._timer.cancel()
        request = Request(event, self, self._arrived)
        self.task = asyncio.get_running_loop().create_task(self._respond(request))

    async def _respond(self, request: Request) -> None:
        try:
            response = await self._serve(request)
        except BadRequest as exc:
            response = self._bad_request(exc)
        except Exception:  # the serve callback's own guard failed: a bug, answered anyway
            log.exception("%s %s failed unexpectedly", request.method, request.path)
            response = Response.text("internal error\n", 500)
        self.answer(response, head_only=request.method == "HEAD")

    async def read_body(self, request: Request, limit: int) -> bytes:
        length = request.header("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise BodyTooLarge(limit, int(length), known=True)
        if self._h11.they_are_waiting_for_100_continue and not self._continued:
            self._continued = True
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise BadRequest(exc.error_status_hint, str(exc)) from None
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise BodyTooLarge(limit, size, known=False)
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            elif event is h11.NEED_DATA:
                if self._lost:
                    raise BadRequest(400, "the connection closed inside the request body")
                await self._wait_for_data()
            else:
                raise BadRequest(400, "the connection closed inside the request body")

    async def _wait_for_data(self) -> None:
        self._pause(False)
        self._more = asyncio.get_running_loop().create_future()
        try:
            await self._more
        finally:
            self._more = None

    def _wake(self) -> None:
        if self._more is not None and not self._more.done():
            self._more.set_result(None)

    def _pause(self, pause: bool) -> None:
        if self._transport is None or pause == self._paused or self._transport.is_closing():
            return
        self._paused = pause
        if pause:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()

    # --- the answer ---------------------------------------------------------------------------

    def _reject(self, error: BadRequest) -> None:
        log.warning("bad HTTP request: %s", error.text)
        self.answer(self._bad_request(error))

    def answer(self, response: Response, *, head_only: bool = False) -> None:
        """Write the answer and end the connection: at once when the request was read whole,
        else after a linger (the module docstring)."""
        if self._answered:
            return
        self._answered = True
        if self._timer is not None:
            self._timer.cancel()
        self._write(response.encode(head_only=head_only))
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._received_whole() or self._lost:
            transport.close()
            return
        self._pause(False)
        if transport.can_write_eof():
            transport.write_eof()
        self._timer = asyncio.get_running_loop().call_later(LINGER, transport.close)

    def _received_whole(self) -> bool:
        """Whether the request has arrived whole (what is buffered of its body consumed): then
        closing at once loses nothing."""
        try:
            while self._h11.their_state is h11.SEND_BODY:
                if self._h11.next_event() is h11.NEED_DATA:
                    break
        except h11.RemoteProtocolError:
            return False
        return self._h11.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED)

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _head_timed_out(self) -> None:
        self._timer = None
        if self.task is None:
            log.info("closing a connection that sent no request within %gs", self._header_timeout)
            self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def shut_down(live: set[HttpConnection], timeout: float) -> None:  # noqa: ASYNC109
    """Let the handlers still running finish within ``timeout``; cancel the rest and give the
    cancellation ``timeout`` more; then close every connection."""
    for attempt in range(2):
        tasks = {c.task for c in live if c.task is not None and not c.task.done()}
        if not tasks:
            break
        if attempt:
            for task in tasks:
                task.cancel()
        await asyncio.wait(tasks, timeout=timeout)
    for connection in list(live):
        connection.close()


class TcpSite:
    """A listener on ``host:port`` (:meth:`listen`) until :meth:`close`, which also closes every
    open connection (its handler cancelled)."""

    def __init__(self, server: asyncio.Server, live: set[HttpConnection]) -> None:
        self._server = server
        self._live = live
        self.port = int(server.sockets[0].getsockname()[1])
        """The bound port (0 at :meth:`listen` picks a free one)."""

    @classmethod
    async def listen(
        cls, host: str, port: int, serve: Serve, *, header_timeout: float,
        bad_request: BadRequestAnswer = plain_error,
    ) -> TcpSite:  # fmt: skip
        live: set[HttpConnection] = set()
        server = await asyncio.get_running_loop().create_server(
            lambda: HttpConnection(serve, bad_request, header_timeout=header_timeout, live=live),
            host,
            port,
        )
        return cls(server, live)

    async def close(self) -> None:
        self._server.close()
        await shut_down(self._live, 0.0)
