"""The daemon's unix-socket site: aiohttp's, except for what a connection's end means.

When the peer's side of a connection ends, asyncio asks the protocol whether to keep the
transport open; aiohttp always says no, so a client that sends its request and then shuts down
its write side (``shutdown(SHUT_WR)``, ``curl --no-keepalive`` style, Go's ``CloseWrite``) never
gets an answer -- and with ``handler_cancellation`` its request is even cancelled. On a unix
socket the two cases can be told apart at that moment: a peer that *closed* (the runtime killed
the shim) has shut down both directions, which ``poll()`` reports as ``POLLHUP``; a peer that
only half-closed has not. The first is cancelled, the second is answered, then the connection
is closed. (Should a half-closed peer die later, that is noticed when the answer is written.)

Bad HTTP, which aiohttp answers itself, gets a CNI error object here too.

The daemon serves through :class:`UnixSocketSite` instead of ``web.SockSite``: the half-close
rule, and connections taken from the listening socket by ``server.intake`` (which decides when
each is read). Everything else (``handler_cancellation``, the timeouts, the quiet logger) also
works with aiohttp's site, through the app's ``handler_args``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

from cni_shim.errors import DECODING_FAILURE, CNIError
from multusd.server.handlers import Handlers, error_response
from multusd.server.intake import Intake, IntakeLimits, peer_closed

log = logging.getLogger(__name__)


class OneLineLogger(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's protocol logger, with every ``exception()`` reduced to one warning line.

    aiohttp logs a malformed request (bad HTTP, a broken chunk, a client that vanished) with
    ``logger.exception``: a traceback per request, which a fuzzer or a confused client turns
    into a flood. The reason is all an operator needs.
    """

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        error = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        reason = f"{type(error).__name__}: {error}" if error is not None else "unknown"
        self.logger.warning(f"{msg}: %s", *args, reason.replace("\n", " "))


def protocol_options(handlers: Handlers) -> dict[str, Any]:
    """The keyword arguments every connection's aiohttp protocol gets: through the app's
    ``handler_args`` and through :class:`UnixSocketSite` (why each: ``server.app``'s docstring)."""
    return {
        "handler_cancellation": True,
        "keepalive_timeout": handlers.limits.header_timeout,
        "logger": OneLineLogger(logging.getLogger("aiohttp.server"), {}),
    }


def peer_hung_up(transport: asyncio.BaseTransport | None) -> bool:
    """Whether the peer closed its socket entirely (not just its write side)."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    return sock is None or peer_closed(sock)


class HalfCloseProtocol(web.RequestHandler):
    """aiohttp's protocol, answering clients that half-closed (see the module docstring)."""

    def __init__(
        self,
        *args: Any,
        on_end: Callable[[], None] | None = None,
        arrived: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._on_end = on_end
        """Called once when the connection ends (the intake's slot)."""
        self.arrived = arrived
        """When its CNI request arrived (loop time), waiting unread included: where the
        request's deadline counts from (``handlers``)."""

    def connection_lost(self, exc: BaseException | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            on_end, self._on_end = self._on_end, None
            if on_end is not None:
                on_end()

    # aiohttp annotates None; asyncio's contract is "true keeps the transport open".
    def eof_received(self) -> bool:  # type: ignore[override]
        # Gone: false, aiohttp closes and the handler is cancelled. Half-closed: true, the
        # transport stays open for the answer (and every answer closes it).
        return not peer_hung_up(self.transport)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # logs (one line), may raise
        text = message or (str(exc) if exc is not None else "") or f"HTTP {status}"
        text = " ".join(text.split())  # aiohttp's parser errors draw a caret on a second line
        response = error_response(CNIError(DECODING_FAILURE, f"bad HTTP request: {text}"))
        if 400 <= status < 500:
            response.set_status(status)
        response.force_close()
        return response


class UnixSocketSite(web.SockSite):
    """``web.SockSite`` with :class:`HalfCloseProtocol` connections and our protocol options,
    taken from the listening socket by :class:`~multusd.server.intake.Intake` in their turn."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, handlers: Handlers) -> None:
        super().__init__(runner, sock)
        self._options: dict[str, Any] = protocol_options(handlers)
        self._options.pop("handler_cancellation")  # the Server's, set through the app
        self._options["access_log"] = None  # as the daemon's runner: no access log
        limits = handlers.limits
        self.intake_limits = IntakeLimits(
            active=limits.max_active, pending=limits.max_pending,
            header_timeout=limits.header_timeout, wait_timeout=limits.request_timeout,
        )  # fmt: skip
        self.intake: Intake | None = None
        self._connecting: set[asyncio.Task[None]] = set()
        """Connections being handed to aiohttp (owned here: a failure is logged, not lost)."""

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        options = self._options

        async def connect(
            sock: socket.socket, on_end: Callable[[], None] | None, arrived: float | None
        ) -> None:
            def protocol() -> HalfCloseProtocol:
                return HalfCloseProtocol(
                    server, loop=loop, on_end=on_end, arrived=arrived, **options
                )

            try:
                await loop.connect_accepted_socket(protocol, sock=sock)
            except Exception as exc:  # the peer is gone already, or out of memory
                log.warning("could not serve a connection: %s", exc)
                sock.close()
                if on_end is not None:
                    on_end()

        def serve(
            sock: socket.socket, on_end: Callable[[], None] | None, arrived: float | None
        ) -> None:
            task = loop.create_task(connect(sock, on_end, arrived))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

        self.intake = Intake(self._sock, serve, self.intake_limits)
        self.intake.start()
        self._server = self.intake  # type: ignore[assignment]  # BaseSite.stop() closes it
