"""Keeping the daemon reachable at ``<socketDir>/multus.sock`` for as long as it serves.

The shims find the daemon by that path alone. Remove the file (``rm -rf`` of ``socketDir`` by
hand, a cleaner of ``/run``, an upstream daemon starting on the node, which empties
``socketDir``) and the daemon's listening socket still listens, but nothing can connect to it
any more: the daemon looks alive to TCP probes on ``healthPort`` and serves nobody.

So :class:`SocketGuard` looks at the path every :data:`CHECK_INTERVAL` and, when it no longer
names the socket the daemon bound (its inode):

* binds a new socket there, with the start-up's rules (``server.socket.bind_socket``: the
  directory made again 0700, a stale socket replaced, a live one never stolen, a file that is
  not a socket never removed), hands it to the intake and closes the old one. Nothing
  restarts: requests in flight go on, and the next shim connects to the new socket;
* if that is not possible (another process serves the path, something else is there, the
  bind fails), ``/healthz`` and ``/readyz`` answer 500 with the reason: with ``healthPort``
  the kubelet's liveness probe then restarts the container, and the next daemon refuses to
  start (exit 3) for as long as the path stays taken. It keeps trying meanwhile: a path that
  frees up is bound again and the probes answer 200.

Why bind again rather than only answer 500: a restart drains the daemon and costs the node its
daemon for the restart's length (ADDs wait, ``00-multus.conf`` removed unless
``keepConfigOnExit``), all for a file the daemon can simply make again. Why a ``stat`` every
second rather than an inotify watch: the directory that would be watched is the one removed
(its watch dies with it) or ``/run`` (busy with everyone's files), and one ``lstat`` a second
costs nothing, needs no re-arming and is done within a second, well before the kubelet's next
probe (every 10 s in our manifests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from multusd.errors import StartupError
from multusd.server.handlers import DaemonState
from multusd.server.listener import SocketSite
from multusd.server.socket import BoundSocket, bind_socket, prepare_socket_dir

log = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0
"""Seconds between two looks at the socket's path."""


class SocketGuard:
    """The socket the daemon serves on, bound again whenever its file is lost.

    Created with the socket bound at start-up (``daemon_parts.bound``); :meth:`keep` runs as
    the supervisor's task ``socket-guard`` while the daemon serves; :meth:`close` at exit
    closes the socket in use and removes its file, if it is still ours.
    """

    def __init__(self, bound: BoundSocket) -> None:
        self.current = bound

    @property
    def path(self) -> str:
        return self.current.path

    def close(self) -> None:
        self.current.sock.close()
        self.current.unlink()

    async def keep(
        self, site: SocketSite, state: DaemonState, interval: float = CHECK_INTERVAL
    ) -> None:
        """Look at the path every ``interval`` seconds (:meth:`check`); runs until cancelled."""
        while True:
            await asyncio.sleep(interval)
            await self.check(site, state)

    async def check(self, site: SocketSite, state: DaemonState) -> None:
        """One look: nothing to do while the path is ours; else bind again, or report why not
        in ``state.unreachable`` (what ``/healthz`` answers 500 with), logged once per reason."""
        if await asyncio.to_thread(self.current.in_place):
            return
        try:
            fresh = await _bind_again(self.path)
        except (StartupError, OSError) as exc:
            reason = f"pod info socket {self.path} is gone and cannot be bound again: {exc}"
            if reason != state.unreachable:
                log.error("%s; /healthz answers 500", reason)
                state.unreachable = reason
            return
        old = self.current
        self.current = fresh
        site.replace_listener(fresh.sock)
        log.warning(
            "pod info socket %s was removed or replaced (inode %d): listening on a new one "
            "(inode %d)",
            self.path, old.inode, fresh.inode,
        )  # fmt: skip
        if state.unreachable:
            state.unreachable = ""
            log.info("pod info socket %s is reachable again; /healthz answers 200", self.path)


def _bind(path: str) -> BoundSocket:
    prepare_socket_dir(os.path.dirname(path))
    return bind_socket(path)


async def _bind_again(path: str) -> BoundSocket:
    """Bind ``path`` again in a worker thread (a ``mkdir``, a ``connect`` probe of whatever is
    there, the bind).

    The thread runs to its end even if the caller is cancelled meanwhile (shutdown began): the
    socket it made is then closed and its file removed at once, so that none outlives the
    daemon unnoticed.
    """
    binding = asyncio.ensure_future(asyncio.to_thread(_bind, path))
    try:
        return await asyncio.shield(binding)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            fresh = await binding
            fresh.sock.close()
            fresh.unlink()
        raise
