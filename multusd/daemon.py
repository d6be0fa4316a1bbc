"""The supervisor: start in order, serve until a signal, shut down in phases, pick the exit code.

It is the only code that decides the process's fate. Start-up resources (what each is made of:
``multusd/daemon_parts.py``) are entered on one ``AsyncExitStack`` and unwound in reverse, so a
failure half-way through start-up still removes the socket it bound; a background task that
dies ends the daemon with a non-zero exit instead of leaving a process that answers probes but
no longer works.

Order, as upstream: wait for the readiness indicator and the primary CNI config, bind the
socket (so a second daemon is refused at once), connect to the API server and fill the pod and
NAD caches (bounded wait), then serve.

Every stage is bounded and every stage honours the stop signals (``STOP_SIGNALS``):

* **Start-up** runs inside one cancel scope (``_Startup``): a signal during any wait (the
  readiness indicator's 45 s, the primary config's 120 s, the caches' 20 s) ends that wait at
  once; what was created so far is unwound and the exit code is 0 (a requested stop).
  Upstream installs its signal handler only after start-up, so a SIGTERM there kills it
  without any clean-up.
* **Shutdown**, in phases: ``/readyz`` answers 500 at once; in-flight requests get
  ``drain_timeout`` (10 s, upstream's) to finish; then each is given ``cancel_timeout`` more
  and cancelled (which kills its plugins), with ``cancel_timeout`` for the cancellation to land;
  the socket is removed; the caches, the event recorder (2 s to post what is queued) and the
  client close; the log's queue is written out (2 s at most). That is 18 s at most
  (``ShutdownSettings.longest``), well inside the manifests' ``terminationGracePeriodSeconds``
  (30 s).
* **The exit deadline** is the last resort: once shutdown has begun (or ``run`` returns), the
  process ends within ``exit_deadline`` (25 s) whatever is stuck, e.g. a worker thread blocked
  in a read of a hung filesystem, which asyncio's executor shutdown would wait for forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from multusd import logs
from multusd.cni.orphans import OrphanReaper
from multusd.config.daemon import DaemonConfig
from multusd.config.manager import ConfigManager
from multusd.config.readiness import (
    ReadinessSettings,
    wait_for_file,
    watch_until_removed,
)
from multusd.config.static import install_static_config
from multusd.daemon_parts import bound, cluster_or_none, metrics_site, serving
from multusd.errors import EXIT_READINESS_LOST
from multusd.k8s.events import EVENTS_DRAIN
from multusd.logs.writer import STOP_TIMEOUT as LOG_STOP_TIMEOUT
from multusd.server.handlers import DaemonState
from multusd.server.listener import SocketSite

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
"""Each ends the daemon as SIGTERM does (docs/operations.md, "Signals"): the runtime's SIGTERM,
and what a terminal sends (SIGINT: Ctrl-C, SIGQUIT: Ctrl-\\, SIGHUP: it closed; ``kill -HUP``
by habit), whose default actions end the process on the spot, leaving a stale socket and
``00-multus.conf`` behind. There is nothing to reload on SIGHUP: the config is read once."""


@dataclass(frozen=True, slots=True)
class ShutdownSettings:
    drain_timeout: float = 10.0
    """Upstream waits 10 s after SIGTERM before cancelling; we stop earlier once idle."""
    cancel_timeout: float = 2.0
    """After the drain, a request still running gets this long again, is cancelled (its
    plugins killed and reaped), and gets this long for that (the unix socket's aiohttp runner:
    its ``shutdown_timeout``, ``server.listener``)."""
    exit_deadline: float = 25.0
    """From the start of shutdown to the end of the process, whatever is stuck; below the
    manifests' ``terminationGracePeriodSeconds`` (30 s), after which the kubelet kills."""

    @property
    def longest(self) -> float:
        """What the shutdown's waits add up to when each runs out: the drain, a request's
        grace and its cancellation, the events' posting, the log's flush (18 s by default,
        docs/operations.md "Shutdown"); the exit deadline lies beyond it."""
        return self.drain_timeout + 2 * self.cancel_timeout + EVENTS_DRAIN + LOG_STOP_TIMEOUT


class ExitDeadline:
    """The last resort of a bounded shutdown: once armed, the process ends ``seconds`` later.

    A daemon thread sleeps and then ``os._exit``s with ``code`` (what ``run`` decided, 1 until
    it has). Nothing in the daemon should need it; it is there for what no code can cancel: a
    worker thread stuck in a system call (a hung NFS or FUSE mount under a config file), which
    asyncio's executor shutdown waits for without a limit. It is never disarmed: ``run`` is
    the process's whole life, and once shutdown has begun the process must end.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.code = 1
        self._armed = False

    def arm(self) -> None:
        if self._armed:
            return
        self._armed = True
        threading.Thread(target=self._expire, name="exit-deadline", daemon=True).start()

    def _expire(self) -> None:
        time.sleep(self.seconds)
        log.error(
            "still running %gs after shutdown began (a thread stuck in a system call?): "
            "exiting now with code %d",
            self.seconds,
            self.code,
        )
        logs.shutdown(timeout=0.5)
        os._exit(self.code)


class _Startup:
    """Start-up's cancel scope: a signal ends whichever start-up wait is running, at once.

    The scope is an ``asyncio.timeout(None)`` that the signal handler reschedules to "now":
    the wait in progress is cancelled, the scope turns that into ``TimeoutError`` at its edge
    (``cancelled`` tells it from any other), and the exit stack unwinds what was built.
    """

    def __init__(self) -> None:
        self.phase = "starting"
        self.cancelled = False
        self._scope: asyncio.Timeout | None = None

    @contextlib.asynccontextmanager
    async def scope(self) -> AsyncIterator[None]:
        async with asyncio.timeout(None) as scope:
            self._scope = scope
            try:
                yield
            finally:
                self._scope = None

    def cancel(self) -> bool:
        """End start-up now; ``False`` once start-up is over (nothing to cancel)."""
        if self._scope is None or self._scope.expired():
            return False
        self.cancelled = True
        self._scope.reschedule(asyncio.get_running_loop().time())
        return True


def use_pidfd_child_watcher(loop: asyncio.AbstractEventLoop) -> None:
    """Reap plugins through pidfds rather than a thread per child.

    Python 3.11's default child watcher starts a thread for every subprocess (~0.5 ms per
    plugin exec, measured); 3.12 switched its default to pidfds, which we adopt early.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    if not isinstance(loop, asyncio.BaseEventLoop):
        return  # uvloop (``--loop uvloop``) reaps its children itself
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return  # kernel without pidfd support: keep the default watcher
    watcher = asyncio.PidfdChildWatcher()
    asyncio.set_child_watcher(watcher)
    watcher.attach_loop(loop)


async def _wait_idle(state: DaemonState, limit: float) -> None:
    """Phase 2 of shutdown: let in-flight requests finish, for up to ``limit`` seconds."""
    if state.in_flight == 0:
        return
    # The drain's start, with what it waits for: the sign that a request was in flight when
    # shutdown began (it finishes, or is cancelled after ``limit``).
    log.info("shutdown: waiting up to %gs for %d request(s) in flight", limit, state.in_flight)
    idle = asyncio.Event()
    state.idle = idle.set
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(limit):
            await idle.wait()
    if state.in_flight:
        log.error("shutdown: %d request(s) still running after %.0fs", state.in_flight, limit)


def _own(
    tasks: list[asyncio.Task[Any]], coro: Coroutine[Any, Any, Any], name: str,
    on_done: Callable[[asyncio.Task[Any]], None],
) -> None:  # fmt: skip
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(on_done)
    tasks.append(task)


async def _cancel_all(tasks: list[asyncio.Task[Any]], on_done: Callable[..., None]) -> None:
    for task in tasks:
        task.remove_done_callback(on_done)
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def run(
    config: DaemonConfig,
    raw: dict[str, Any],
    settings: ShutdownSettings | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Serve until a stop signal (exit 0, also during start-up), the readiness indicator's
    removal (exit 2), or a fatal background failure (exit 1). Start-up failures raise
    ``StartupError``. Once this returns or shutdown begins, the process ends within
    ``settings.exit_deadline`` (see ``ExitDeadline``): call it only as the process's main."""
    settings = settings or ShutdownSettings()
    environ = os.environ if environ is None else environ
    loop = asyncio.get_running_loop()
    log.info("event loop: %s.%s", type(loop).__module__, type(loop).__qualname__)
    use_pidfd_child_watcher(loop)
    stop = asyncio.Event()
    startup = _Startup()
    deadline = ExitDeadline(settings.exit_deadline)
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        name = signal.Signals(signum).name
        signals_seen += 1
        if signals_seen > 1:
            log.error("second signal %s: exiting now", name)
            os._exit(1)
        deadline.arm()
        if startup.cancel():
            log.info("received %s while %s: stopping", name, startup.phase)
        else:
            log.info("received %s: shutting down", name)
        stop.set()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    state = DaemonState()
    exit_code = 0
    tasks: list[asyncio.Task[Any]] = []

    def task_done(task: asyncio.Task[Any]) -> None:
        """A watch ended: the readiness file is gone (exit 2), or something broke (exit 1)."""
        nonlocal exit_code
        if task.cancelled():
            return
        error = task.exception()
        if error is None and task.get_name() == "readiness-watch":
            log.error("%s: exiting", task.result())
            exit_code = EXIT_READINESS_LOST
        else:
            log.error("%s stopped: %r", task.get_name(), error)
            state.failure = f"{task.get_name()} stopped"
        stop.set()

    try:
        async with contextlib.AsyncExitStack() as stack:
            manager: ConfigManager | None = None
            site: SocketSite | None = None
            try:
                async with startup.scope():
                    readiness = ReadinessSettings()
                    if config.readiness_indicator_file:
                        startup.phase = "waiting for the readiness indicator"
                        log.info(
                            "waiting for the readiness indicator %s (up to %gs)",
                            config.readiness_indicator_file,
                            readiness.startup_timeout,
                        )
                        await wait_for_file(config.readiness_indicator_file, readiness)
                    if config.is_auto:
                        startup.phase = "waiting for the primary CNI config"
                        manager = await stack.enter_async_context(ConfigManager(config, raw))
                        await manager.wait_for_primary()
                    else:
                        await install_static_config(config)
                    startup.phase = "binding the socket"
                    sock = stack.enter_context(bound(config))
                    startup.phase = "waiting for the caches"
                    cluster = await stack.enter_async_context(
                        cluster_or_none(config, environ, state, stop)
                    )
                    startup.phase = "starting the server"
                    metrics = await stack.enter_async_context(metrics_site(config, state, cluster))
                    if not stop.is_set():
                        site = await stack.enter_async_context(
                            serving(
                                sock, config, raw, state, cluster=cluster, metrics=metrics,
                                cancel_timeout=settings.cancel_timeout,
                            )
                        )  # fmt: skip
                serving_now = not stop.is_set()
            except TimeoutError:
                if not startup.cancelled:
                    raise
                serving_now = False
            # Outside the cancel scope: a signal from here on is an ordinary shutdown, so a
            # config write in progress completes and is then removed like any other.
            if serving_now:
                _own(tasks, OrphanReaper().run(), "orphan-reaper", task_done)  # cni/orphans.py
                # The shim-facing config appears only once the daemon answers (upstream).
                if manager is not None:
                    await manager.write_config()
                    _own(tasks, manager.watch(), "config-watch", task_done)
                if site is not None:  # its file lost: bound again, or /healthz says why not
                    _own(tasks, sock.keep(site, state), "socket-guard", task_done)
                if config.readiness_indicator_file and config.benchmark_readiness_stat:
                    log.info(
                        "readiness indicator %s: checked by each ADD and CHECK "
                        "(benchmarkReadinessStat), not watched: losing it stalls requests "
                        "and never stops the daemon",
                        config.readiness_indicator_file,
                    )
                elif config.readiness_indicator_file:
                    watch = watch_until_removed(config.readiness_indicator_file, readiness)
                    _own(tasks, watch, "readiness-watch", task_done)
            await stop.wait()
            deadline.arm()
            # Phase 1: new ADDs wait for a replacement daemon (the shim polls /readyz) while
            # DELs, which only check /healthz, are still served during the drain.
            state.shutting_down = True
            await _cancel_all(tasks, task_done)
            if exit_code == EXIT_READINESS_LOST and manager is not None:
                await manager.remove_config()  # new pods must wait for the primary network
            else:
                await _wait_idle(state, settings.drain_timeout)
            # Phase 3 (leaving the stack): requests still running are cancelled, the server
            # stops, the socket is removed, the caches and the client close.
    finally:
        deadline.arm()
        await _cancel_all(tasks, task_done)
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
    if state.failure:
        log.error("daemon stopped: %s", state.failure)
        exit_code = 1
    else:
        log.info("shutdown complete")
    deadline.code = exit_code
    return exit_code
