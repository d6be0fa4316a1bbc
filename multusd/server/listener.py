"""The daemon's unix-socket server: connections taken from the listening socket by
``server.intake`` in their turn, each served by ``multusd.httpserver`` with the API's rules.

What a connection's end means is decided here. When the peer's side of a connection ends,
asyncio asks the protocol whether to keep the transport open. On a unix socket two cases can be
told apart at that moment: a peer that *closed* (the runtime killed the shim) has shut down both
directions, which ``poll()`` reports as ``POLLHUP``; a peer that only half-closed
(``shutdown(SHUT_WR)``, ``curl --no-keepalive`` style, Go's ``CloseWrite``) has not. The first
is cancelled (its plugins killed, an ADD rolled back), the second is answered, then the
connection is closed. (Should a half-closed peer die later, that is noticed when the answer is
written.)

Shutdown (:meth:`SocketServer.close`): the intake stops (requests waiting unread are answered
code 11), every request still running is cancelled through its queue, the handlers get
``cancel_timeout`` to return, are then cancelled outright and get ``cancel_timeout`` more.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from multusd.cni.reaper import adopt_orphans
from multusd.httpserver import HttpConnection, shut_down
from multusd.server.app import App, bad_http
from multusd.server.handlers import Handlers
from multusd.server.intake import Intake, IntakeLimits, peer_closed

log = logging.getLogger(__name__)


def peer_hung_up(transport: asyncio.BaseTransport) -> bool:
    """Whether the peer closed its socket entirely (not just its write side)."""
    sock = transport.get_extra_info("socket")
    return sock is None or peer_closed(sock)


class SocketServer:
    """The API on the bound unix socket, for as long as it is open."""

    def __init__(self, sock: socket.socket, app: App, handlers: Handlers) -> None:
        self._sock = sock
        self._app = app
        self._handlers = handlers
        limits = handlers.limits
        self.intake_limits = IntakeLimits(
            active=limits.max_active, pending=limits.max_pending,
            header_timeout=limits.header_timeout, wait_timeout=limits.request_timeout,
        )  # fmt: skip
        self.intake: Intake | None = None
        self.live: set[HttpConnection] = set()
        """Every connection being served (shutdown waits for, then cancels, their handlers)."""
        self._connecting: set[asyncio.Task[None]] = set()
        """Connections being handed to asyncio (owned here: a failure is logged, not lost)."""

    def start(self) -> None:
        # Serving plugins: become their descendants' subreaper (``reaper.adopt_orphans``).
        if not adopt_orphans():
            log.warning(
                "could not become a child subreaper: a killed plugin's children go to PID 1"
            )
        self.intake = Intake(self._sock, self._serve, self.intake_limits)
        self.intake.start()

    def _serve(
        self, sock: socket.socket, on_end: Callable[[], None] | None, arrived: float | None
    ) -> None:
        task = asyncio.get_running_loop().create_task(self._connect(sock, on_end, arrived))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect(
        self, sock: socket.socket, on_end: Callable[[], None] | None, arrived: float | None
    ) -> None:
        def protocol() -> HttpConnection:
            return HttpConnection(
                self._app.serve, bad_http,
                header_timeout=self._handlers.limits.header_timeout, hung_up=peer_hung_up,
                arrived=arrived, on_end=on_end, live=self.live,
            )  # fmt: skip

        try:
            await asyncio.get_running_loop().connect_accepted_socket(protocol, sock=sock)
        except Exception as exc:  # the peer is gone already, or out of memory
            log.warning("could not serve a connection: %s", exc)
            sock.close()
            if on_end is not None:
                on_end()

    async def close(self, cancel_timeout: float) -> None:
        if self.intake is not None:
            self.intake.close()
        for task in list(self._connecting):
            task.cancel()
        await self._handlers.cancel_all()
        await shut_down(self.live, cancel_timeout)
