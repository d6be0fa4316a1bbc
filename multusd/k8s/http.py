"""A small asyncio HTTP/1.1 client on ``h11``: what the API client needs of one, and no more.

aiohttp's client cost the daemon about 12 MiB of its 50 MiB memory limit, for a server it
talks to in one way only: short requests with a total deadline, and a few long watches read as
they arrive. ``h11`` does the parsing and the framing (Content-Length, chunked, close-delimited
bodies, keep-alive rules); this module adds the sockets, the deadlines and a keep-alive pool.

* :meth:`HttpClient.request` reads the whole answer within one total deadline (connect, send,
  response). Connections are kept alive and reused, last used first; a reused connection that
  fails before any byte of the answer arrived is one the server closed while it was idle, and
  the request is sent once more on a new connection. Go's net/http does so for idempotent
  requests; here every method is, because every call the daemon makes may be repeated: reads,
  the network-status merge PATCH (the same annotation again), an Event (its name is fixed when
  it is made: a repeat is refused as AlreadyExists, logged).
* :meth:`HttpClient.stream` opens a connection of its own for a watch: no total deadline, but
  every read waits at most ``read_timeout``; it is closed when the block exits.
* failures: the socket's own (``OSError``, TLS errors included) as they are, ``TimeoutError``
  for a deadline, :class:`HttpError` for a server that broke the protocol or hung up early.
  A connection whose exchange failed or was cancelled is closed, never reused.

No compression (no ``Accept-Encoding``), no chunked uploads, no proxies, no redirects.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import h11

READ_SIZE = 64 * 1024
"""Bytes asked of the socket per read."""
MAX_HEAD = 1024 * 1024
"""The largest response head h11 may buffer (its default, 16 KiB, is too tight for some)."""
CLOSE_WAIT = 1.0
"""How long closing a connection may wait for the transport to go (a TLS peer that never
answers close_notify would otherwise hold it for asyncio's 30 s shutdown timeout)."""
DEFAULT_MEDIA_TYPE = "application/octet-stream"
"""The media type of a body without Content-Type (HTTP's own default; aiohttp says the same)."""


class HttpError(Exception):
    """A protocol failure: a malformed response, a connection closed mid-response, etc."""


class _EarlyClose(HttpError):
    """The server closed the connection before sending any of its answer."""


class Headers(Mapping[str, str]):
    """The response headers, read-only; names are case-insensitive, a lookup gives the first
    value of a repeated header (:meth:`getall` gives them all)."""

    __slots__ = ("_first", "_items")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        first: dict[str, str] = {}
        for name, value in items:
            first.setdefault(name.lower(), value)
        self._first = first

    def __getitem__(self, name: str) -> str:
        if not isinstance(name, str):
            raise KeyError(name)
        return self._first[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def __iter__(self) -> Iterator[str]:
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def getall(self, name: str) -> list[str]:
        """Every value of ``name``, in the order received."""
        key = name.lower()
        return [value for n, value in self._items if n.lower() == key]

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


def _media_type(headers: Headers) -> str:
    """``text/plain; charset=utf-8`` → ``text/plain``; the default when absent or empty."""
    value = headers.get("content-type", "") or ""
    media = value.split(";", 1)[0].strip().lower()
    return media or DEFAULT_MEDIA_TYPE


def _headers_of(event: h11.Response) -> Headers:
    return Headers([(n.decode("latin-1"), v.decode("latin-1")) for n, v in event.headers])


@dataclass(frozen=True, slots=True)
class Response:
    """A whole answer to :meth:`HttpClient.request`."""

    status: int
    headers: Headers
    body: bytes

    @property
    def content_type(self) -> str:
        """The media type, lowercased and without parameters (``application/json``)."""
        return _media_type(self.headers)


class _Connection:
    """One socket and its h11 state machine; ``received`` says whether any byte of the
    current answer arrived (the line between a stale keep-alive connection and a failure)."""

    __slots__ = ("proto", "reader", "received", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.proto = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.received = False

    def stale(self) -> bool:
        """Whether the peer closed (or reset) this idle connection."""
        reader = self.reader
        return self.writer.is_closing() or reader.at_eof() or reader.exception() is not None

    async def send(self, request: h11.Request, body: bytes | None) -> None:
        proto = self.proto
        try:
            data = proto.send(request) or b""
            if body:
                data += proto.send(h11.Data(data=body)) or b""
            data += proto.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            raise HttpError(f"cannot send {request.method!r}: {exc}") from exc
        self.writer.write(data)
        await self.writer.drain()

    async def next_event(self, read_timeout: float | None = None) -> h11.Event:
        """The next event from the server, reading (each read bounded by ``read_timeout``)
        as long as h11 needs more data."""
        while True:
            try:
                event = self.proto.next_event()
            except h11.RemoteProtocolError as exc:
                raise HttpError(f"bad response from the server: {exc}") from exc
            if event is h11.NEED_DATA:
                async with asyncio.timeout(read_timeout):
                    data = await self.reader.read(READ_SIZE)
                if not data and not self.received:
                    raise _EarlyClose("the server closed the connection without a response")
                self.received = True
                self.proto.receive_data(data)  # b"": the server closed its end
            elif event is h11.PAUSED:
                raise HttpError("the server sent data after its response")
            else:
                assert isinstance(event, h11.Event)
                return event

    async def response(self, read_timeout: float | None = None) -> h11.Response:
        """The response head, past any 1xx."""
        while True:
            event = await self.next_event(read_timeout)
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise HttpError(f"unexpected {type(event).__name__} before the response")

    async def chunks(self, read_timeout: float | None = None) -> AsyncIterator[bytes]:
        """The body after the head, as it arrives, until its end (at once if it came)."""
        while self.proto.their_state is h11.SEND_BODY:
            event = await self.next_event(read_timeout)
            if isinstance(event, h11.Data):
                yield event.data
            elif isinstance(event, h11.EndOfMessage):
                return
            else:
                raise HttpError(f"unexpected {type(event).__name__} in the response body")

    def reusable(self) -> bool:
        """Start the next cycle if both sides finished cleanly and nobody asked to close."""
        proto = self.proto
        if proto.our_state is not h11.DONE or proto.their_state is not h11.DONE:
            return False
        proto.start_next_cycle()
        self.received = False
        return True

    async def close(self, *, graceful: bool) -> None:
        """Close, never for long: a failed exchange is aborted outright, an idle connection
        closed properly (TLS close_notify) within ``CLOSE_WAIT``."""
        writer = self.writer
        if graceful:
            writer.close()
        else:
            writer.transport.abort()
        try:
            async with asyncio.timeout(CLOSE_WAIT):
                await writer.wait_closed()
        except Exception:  # the connection's own error, or a shutdown that took too long
            writer.transport.abort()


class StreamResponse:
    """The head of a streamed answer, and its body to read as it arrives."""

    def __init__(self, conn: _Connection, head: h11.Response, read_timeout: float | None) -> None:
        self.status: int = head.status_code
        self.headers = _headers_of(head)
        self.content_type = _media_type(self.headers)
        self._conn = conn
        self._read_timeout = read_timeout

    async def read(self) -> bytes:
        """The rest of the body."""
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body data as it arrives (chunked encoding already undone); a read that waits
        longer than ``read_timeout`` raises ``TimeoutError``."""
        async for chunk in self._conn.chunks(self._read_timeout):
            if chunk:
                yield bytes(chunk)  # h11 hands out bytearrays


class HttpClient:
    """Requests to one server (``base_url``: scheme, host, port and an optional path prefix),
    over a pool of at most ``max_idle`` idle keep-alive connections. ``headers`` go with every
    request; a request's own headers replace same-named ones."""

    def __init__(
        self,
        base_url: str,
        *,
        ssl_context: ssl.SSLContext | None,
        headers: Mapping[str, str],
        connect_timeout: float,
        max_idle: int = 16,
    ) -> None:
        url = urlsplit(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._host = url.hostname  # brackets of an IPv6 literal removed
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._host_header = url.netloc.rpartition("@")[2]
        self._prefix = url.path
        self._ssl: ssl.SSLContext | None = None
        if url.scheme == "https":
            # Reads the system's CAs: callers on the loop pass a context made in a thread.
            self._ssl = ssl_context if ssl_context is not None else ssl.create_default_context()
        self._headers = {name.lower(): (name, value) for name, value in headers.items()}
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._idle: list[_Connection] = []
        self._closed = False

    async def request(
        self,
        method: str,
        target: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float,  # noqa: ASYNC109 - the request's total deadline, connect included
    ) -> Response:
        """Send one request and read its whole answer, all within ``timeout`` seconds."""
        request = self._request(method, target, params, headers, body)
        async with asyncio.timeout(timeout):
            while self._idle:
                conn = self._idle.pop()
                if not conn.stale():
                    try:
                        return await self._exchange(conn, request, body)
                    except (ConnectionError, _EarlyClose):
                        if conn.received:
                            raise
                    break  # the server closed it while idle: once more on a new connection
                await conn.close(graceful=False)
            conn = await self._connect(min(self._connect_timeout, timeout))
            return await self._exchange(conn, request, body)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None,
    ) -> AsyncIterator[StreamResponse]:
        """A request on a connection of its own (a watch must not hold a pooled one), its
        answer's head within ``read_timeout``, then every read bounded by it."""
        request = self._request(method, target, params, headers, None)
        limit = self._connect_timeout if connect_timeout is None else connect_timeout
        conn = await self._connect(limit)
        finished = False
        try:
            async with asyncio.timeout(read_timeout):
                await conn.send(request, None)
                head = await conn.response()
            response = StreamResponse(conn, head, read_timeout)
            yield response
            finished = conn.proto.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED)
        finally:
            await conn.close(graceful=finished)

    async def close(self) -> None:
        """Close every idle connection; the client takes no more requests."""
        self._closed = True
        idle, self._idle = self._idle, []
        await asyncio.gather(*(conn.close(graceful=True) for conn in idle))

    def _request(
        self,
        method: str,
        target: str,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
        body: bytes | None,
    ) -> h11.Request:
        if self._closed:
            raise RuntimeError("HttpClient used after close()")
        target = self._prefix + target
        if params:
            target += ("&" if "?" in target else "?") + urlencode(params)
        merged = {"host": ("Host", self._host_header), **self._headers}
        for name, value in (headers or {}).items():
            merged[name.lower()] = (name, value)
        if body is not None:
            merged["content-length"] = ("Content-Length", str(len(body)))
        try:
            return h11.Request(method=method, target=target, headers=list(merged.values()))
        except h11.LocalProtocolError as exc:
            raise HttpError(f"cannot send {method} {target}: {exc}") from exc

    async def _connect(self, limit: float) -> _Connection:
        async with asyncio.timeout(limit):
            reader, writer = await asyncio.open_connection(
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._host if self._ssl is not None else None,
                limit=READ_SIZE,
            )
        return _Connection(reader, writer)

    async def _exchange(
        self, conn: _Connection, request: h11.Request, body: bytes | None
    ) -> Response:
        """One request and its answer on ``conn``, which goes back to the pool only after a
        clean end (anything else, cancellation included, closes it)."""
        answered = pooled = False
        try:
            await conn.send(request, body)
            head = await conn.response()
            data = b"".join([chunk async for chunk in conn.chunks()])
            answered = True
            if conn.reusable() and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                pooled = True
            return Response(head.status_code, _headers_of(head), data)
        finally:
            if not pooled:
                await conn.close(graceful=answered)
