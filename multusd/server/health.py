"""``/healthz`` and ``/readyz`` on ``127.0.0.1:<healthPort>``, for the kubelet's HTTP probes.

An exec probe is a process in the daemon's container, and so in its memory cgroup: under
upstream's 50 Mi limit each ``multusd probe`` is charged ~5 MiB while it runs, and the kubelet
starts the liveness and readiness probes on the same clock, so every ten seconds 10 MiB of the
daemon's 50 went to asking it whether it is alive (docs/performance.md, "Under a memory limit").
An ``httpGet`` probe is the kubelet's own request: it costs the container nothing but the
answer. The DaemonSet runs with ``hostNetwork``, so ``host: 127.0.0.1`` in the probe reaches the
node's loopback, where this site listens, and nothing off the node can reach it.

The handlers are the unix socket's own (``server.handlers``: the same answers, ``/readyz`` 500
from the moment shutdown begins), and the site lives exactly as long as the socket's: the
kubelet sees the same daemon through either door. Off unless ``healthPort`` is set.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from multusd.errors import StartupError
from multusd.server.app import api_middlewares
from multusd.server.handlers import Handlers
from multusd.server.runner import runner_options

HOST = "127.0.0.1"
"""Loopback only: the node's own kubelet is the only client."""
SHUTDOWN_TIMEOUT = 1.0
"""Seconds a probe still being answered at shutdown gets (its handlers do not wait on anything)."""


def health_app(handlers: Handlers) -> web.Application:
    """The probes, as the kubelet's ``httpGet`` sends them (GET; HEAD answered too), with the
    unix socket's 404/405 shapes and one request per connection (``server.app``)."""
    app = web.Application(middlewares=api_middlewares())
    for path, handler in (("/healthz", handlers.healthz), ("/readyz", handlers.readyz)):
        app.router.add_get(path, handler, allow_head=True)
    return app


@contextlib.asynccontextmanager
async def health_site(handlers: Handlers, port: int) -> AsyncIterator[int]:
    """Serve the probes on ``127.0.0.1:port`` for the block's duration; yields the bound port
    (0 picks a free one, for tests)."""
    options = runner_options(
        header_timeout=handlers.limits.header_timeout, shutdown_timeout=SHUTDOWN_TIMEOUT
    )
    runner = web.AppRunner(health_app(handlers), **options)
    await runner.setup()
    try:
        site = web.TCPSite(runner, HOST, port)
        try:
            await site.start()
        except OSError as exc:
            raise StartupError(f"failed to listen on {HOST}:{port} (healthPort): {exc}") from exc
        yield site.port
    finally:
        await runner.cleanup()
