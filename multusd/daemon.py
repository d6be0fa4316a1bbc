"""The supervisor: start in order, serve until a signal, shut down in phases, pick the exit code.

It is the only code that decides the process's fate. Start-up resources are entered on one
``AsyncExitStack`` and unwound in reverse, so a failure half-way through start-up still removes
the socket it bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from multusd.cni.invoke import SubprocessExecutor
from multusd.commands.context import Services
from multusd.config.daemon import DaemonConfig
from multusd.errors import StartupError
from multusd.server.app import build_app
from multusd.server.handlers import DaemonState, Handlers
from multusd.server.socket import bind_socket, prepare_socket_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShutdownSettings:
    drain_timeout: float = 10.0
    """Upstream waits 10 s after SIGTERM before cancelling; we stop earlier once idle."""


@contextlib.asynccontextmanager
async def serving(
    config: DaemonConfig, raw: dict[str, Any], state: DaemonState
) -> AsyncIterator[web.AppRunner]:
    """Bind the socket and serve ``/cni`` until the context exits; the socket is removed."""
    if os.geteuid() != 0:
        raise StartupError(
            "failed to run multus-daemon with root: permission denied, "
            f"now running in uid: {os.geteuid()}"
        )
    prepare_socket_dir(config.socket_dir)
    bound = bind_socket(config.socket_path)
    try:
        services = Services(
            executor=SubprocessExecutor(chroot_dir=config.chroot_dir or None),
            plugin_timeout=config.plugin_timeout,
        )
        handlers = Handlers(
            services=services,
            daemon_raw=raw,
            ignore_readiness=config.is_auto,
            state=state,
        )
        app = build_app(handlers, max_request_bytes=config.max_request_bytes)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.SockSite(runner, bound.sock).start()
            log.info("listening on %s", config.socket_path)
            yield runner
        finally:
            await runner.cleanup()
    finally:
        bound.sock.close()
        bound.unlink()


async def _wait_idle(state: DaemonState, limit: float) -> None:
    """Phase 2 of shutdown: let in-flight requests finish, for up to ``limit`` seconds."""
    if state.in_flight == 0:
        return
    idle = asyncio.Event()
    state.idle = idle.set
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(limit):
            await idle.wait()
    if state.in_flight:
        log.error("shutdown: %d request(s) still running after %.0fs", state.in_flight, limit)


def use_pidfd_child_watcher(loop: asyncio.AbstractEventLoop) -> None:
    """Reap plugins through pidfds rather than a thread per child.

    Python 3.11's default child watcher starts a thread for every subprocess (~0.5 ms per
    plugin exec, measured); 3.12 switched its default to pidfds, which we adopt early.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return  # kernel without pidfd support: keep the default watcher
    watcher = asyncio.PidfdChildWatcher()
    asyncio.set_child_watcher(watcher)
    watcher.attach_loop(loop)


async def run(
    config: DaemonConfig, raw: dict[str, Any], settings: ShutdownSettings | None = None
) -> int:
    """Serve until SIGTERM/SIGINT; return the process exit code."""
    settings = settings or ShutdownSettings()
    loop = asyncio.get_running_loop()
    use_pidfd_child_watcher(loop)
    stop = asyncio.Event()
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            log.error("second signal %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    state = DaemonState()
    try:
        async with serving(config, raw, state):
            await stop.wait()
            # Phase 1: new ADDs wait for a replacement daemon (the shim polls /readyz) while
            # DELs, which only check /healthz, are still served during the drain.
            state.shutting_down = True
            await _wait_idle(state, settings.drain_timeout)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    log.info("shutdown complete")
    return 0
