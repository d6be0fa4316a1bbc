"""The API on the daemon's unix socket: an aiohttp runner whose connections the intake accepts.

aiohttp's own sites accept every connection and read it at once; here ``server.intake`` accepts
them and decides when each is read. :class:`SocketSite` is the runner's site for that socket:
it starts the intake and hands each connection the intake lets through to aiohttp with
``loop.connect_accepted_socket``, the protocol made by the runner's ``web.Server`` and wrapped
in a :class:`~multusd.server.connection.Connection` (the intake's slot, the request's arrival
time, and what a connection's end means).

Shutdown is the runner's (:func:`socket_server` leaving): the site stops first (the intake stops
accepting, and the requests waiting unread are answered code 11), the app's ``on_shutdown``
cancels every request still running through its queue and waits for them to unwind (plugins
killed, ADDs rolled back: ``server.app``); a handler still running after that gets
``cancel_timeout`` to return, ``cancel_timeout`` more once its body read is cut off, and is then
cancelled (aiohttp's ``shutdown_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from multusd.metrics import Recorder
from multusd.server.app import build_app
from multusd.server.connection import Connection
from multusd.server.handlers import Handlers
from multusd.server.intake import Intake, IntakeLimits, peer_closed
from multusd.server.runner import runner_options

log = logging.getLogger(__name__)


def peer_hung_up(transport: asyncio.BaseTransport) -> bool:
    """Whether the peer closed its socket entirely (not just its write side)."""
    sock = transport.get_extra_info("socket")
    return sock is None or peer_closed(sock)


class SocketSite(web.BaseSite):
    """The runner's site on the bound unix socket: connections taken from it by
    :class:`~multusd.server.intake.Intake` in their turn, each served by the runner's server."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, handlers: Handlers) -> None:
        super().__init__(runner)
        self._listening = sock
        self._name = f"http://unix:{sock.getsockname()}:"
        self._web_server = runner.server
        self._handlers = handlers
        limits = handlers.limits
        self.intake_limits = IntakeLimits(
            active=limits.max_active, pending=limits.max_pending,
            header_timeout=limits.header_timeout, wait_timeout=limits.request_timeout,
        )  # fmt: skip
        self.intake: Intake | None = None
        self._connecting: set[asyncio.Task[None]] = set()
        """Connections being handed to aiohttp (owned here: a failure is logged, not lost)."""

    @property
    def name(self) -> str:
        return self._name

    async def start(self) -> None:
        await super().start()  # registers the site: the runner's cleanup stops it
        self.intake = Intake(self._listening, self._serve, self.intake_limits)
        self.intake.start()

    def replace_listener(self, sock: socket.socket) -> None:
        """Serve on ``sock`` from now on: the socket bound again at the path after its file was
        lost (``server.socketguard``); the old one is closed once its backlog is taken."""
        self._listening = sock
        if self.intake is not None:
            self.intake.replace_listener(sock)

    async def stop(self) -> None:
        if self.intake is not None:
            self.intake.close()
        for task in list(self._connecting):
            task.cancel()
        await super().stop()

    def _serve(
        self, sock: socket.socket, on_end: Callable[[], None] | None, arrived: float | None
    ) -> None:
        task = asyncio.get_running_loop().create_task(self._connect(sock, on_end, arrived))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect(
        self, sock: socket.socket, on_end: Callable[[], None] | None, arrived: float | None
    ) -> None:
        server = self._web_server
        assert server is not None  # the runner was set up before the site was made

        def protocol() -> Connection:
            return Connection(
                server(), hung_up=peer_hung_up, arrivals=self._handlers.arrivals,
                arrived=arrived, on_end=on_end,
            )  # fmt: skip

        try:
            await asyncio.get_running_loop().connect_accepted_socket(protocol, sock=sock)
        except Exception as exc:  # the peer is gone already, or out of memory
            log.warning("could not serve a connection: %s", exc)
            sock.close()
            if on_end is not None:
                on_end()


@contextlib.asynccontextmanager
async def socket_server(
    sock: socket.socket, handlers: Handlers, *, cancel_timeout: float,
    metrics: Recorder | None = None,
) -> AsyncIterator[SocketSite]:  # fmt: skip
    """Serve the API on the bound (listening) ``sock`` for the block's duration; on the way
    out, shut down as the module docstring says."""
    options = runner_options(
        header_timeout=handlers.limits.header_timeout, shutdown_timeout=cancel_timeout
    )
    runner = web.AppRunner(build_app(handlers, metrics=metrics), **options)
    await runner.setup()  # the app's start-up: the subreaper (``server.app``)
    try:
        site = SocketSite(runner, sock, handlers)
        await site.start()
        yield site
    finally:
        await runner.cleanup()
