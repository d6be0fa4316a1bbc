"""A connection of the unix socket: aiohttp's protocol, and what the daemon needs of its ends.

aiohttp's ``web.Server`` makes one protocol per connection, which speaks HTTP. Three things about
a connection of the unix socket are the daemon's own; :class:`Connection` adds them around that
protocol, forwarding asyncio's every callback to it, so nothing of aiohttp is overridden:

* the connection's slot in the intake ends with it (``on_end``, called once, when it is lost);
* the arrival time of its CNI request, where the request's deadline counts from (time waiting
  unread in the intake included), is in ``arrivals`` under its transport for as long as it
  lives: the handlers find it through ``request.transport`` (``server.handlers``);
* when the peer's side of the connection ends, asyncio asks the protocol whether to keep the
  transport open. aiohttp always says no, so with ``handler_cancellation`` the request is
  cancelled and never answered. A peer that only shut down its write side
  (``shutdown(SHUT_WR)``, ``curl --no-keepalive`` style, Go's ``CloseWrite``) still waits for
  its answer: then the answer is yes, the transport stays open, and the answer closes it. A
  peer that *closed* (the runtime killed the shim) gets aiohttp's no, and its request is
  cancelled (its plugins killed, an ADD rolled back). ``hung_up`` tells the two apart
  (``server.listener``: ``POLLHUP`` on the unix socket). Should a half-closed peer die later,
  that is noticed when the answer is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping

Arrivals = MutableMapping[asyncio.BaseTransport, float]
"""When the CNI request of each live connection arrived (the loop's time), by its transport."""
HungUp = Callable[[asyncio.BaseTransport], bool]
"""Whether the peer of a transport closed its socket entirely (not just its write side)."""


class Connection(asyncio.Protocol):
    """``inner`` (aiohttp's protocol for one connection), with the daemon's rules for its ends."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        *,
        hung_up: HungUp,
        arrivals: Arrivals,
        arrived: float | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self._inner = inner
        self._hung_up = hung_up
        self._arrivals = arrivals
        self._arrived = arrived
        self._on_end = on_end
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if self._arrived is not None:
            self._arrivals[transport] = self._arrived
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._transport is not None and not self._hung_up(self._transport):
            return True  # half-closed: keep the transport open for the answer
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self._inner.connection_lost(exc)
        finally:
            if self._transport is not None:
                self._arrivals.pop(self._transport, None)
            on_end, self._on_end = self._on_end, None
            if on_end is not None:
                on_end()
