"""Reaping what the daemon adopts, as it ends, without ever taking a plugin's exit status.

The daemon is its plugins' child subreaper (:func:`multusd.cni.reaper.adopt_orphans`): what a
plugin leaves running when it exits (a backgrounded ``sleep``, a helper that daemonized) is
reparented to the daemon, not to the host's init. asyncio reaps only the processes it started
and :func:`multusd.cni.reaper.kill_and_reap` only the groups it killed, so every other orphan
stayed a zombie until the daemon exited (issue 22: 40 of them after 20 ADD/DEL pairs of a
plugin that backgrounds two ``sleep``\\ s). :class:`OrphanReaper`, a task the supervisor owns,
reaps them.

**What is reaped.** A zombie child is reaped here only when it cannot be a plugin whose exit
status a request still waits for. The child watcher (asyncio's or uvloop's) ``waitpid``\\ s each
plugin itself; taken from it, asyncio reports 255 for a plugin that exited 0, and uvloop never
reports it at all. Every plugin is started with ``start_new_session``: it calls ``setsid`` in
the child before its exec, and a session leader stays one until it dies (it can change
neither its session nor its group). So a child of the daemon is

* in the daemon's own session: left alone. A plugin between its fork and its ``setsid`` is
  there, and so would be anything the daemon started without a session of its own (nothing
  does today), which its starter waits for. No orphan is: orphans descend from plugins, and
  a process leaves a session only for a new one of its own.
* in another session and not its leader (``pid != sid``): reaped. It cannot be a plugin.
* the leader of another session: a plugin, or an orphan that called ``setsid`` itself. Only
  :data:`LIVE_PLUGINS` tells them apart: the executor registers each plugin the moment its
  spawn returns (no ``await`` in between) and the entry stands until asyncio has reaped it
  (its ``returncode`` is set). Between the fork and that moment a spawn is *under way*
  (``create_subprocess_exec`` still connects the pipes, for a few iterations of the loop)
  and its pid is unknown, so while any spawn is under way a zombie session leader is not
  reaped but deferred until the last spawn under way returns. Caveat: a spawn cancelled a
  second time while asyncio cleans up after its first cancellation leaves its process to
  asyncio unregistered; reaped here, asyncio logs that it reports 255 for a process nobody
  waits for (the same as when asyncio's own ``Popen.poll()`` in ``close()`` takes it).

**When.** Each process that can leave orphans behind is watched through a pidfd on the loop
(``add_reader``): every plugin from its spawn on (:meth:`LivePlugins.spawned`), and every live
adopted child a sweep finds. Its end wakes the reaper, which sweeps: the children it adopted at
that moment are reaped if they ended, watched if not. A burst of ends is one sweep
(``settle``). A sweep also runs every ``backstop`` seconds, for what is orphaned while its
plugin still runs (a grandchild whose parent died first: nothing watched ended; the plugin's
own end sweeps it too), and every ``poll`` seconds while something could not be watched (no
pidfds, the ``max_watched`` cap) or a session leader was deferred.

Not SIGCHLD: uvloop refuses a handler for it (``RuntimeError``: libuv reaps its children on
it), and a handler turns SIGCHLD from ignored into caught for the whole process, so every
plugin's exit would interrupt a system call in some thread (``EINTR``), threads of C and Rust
libraries included. A pidfd concerns one process and nothing else, and is the same on both
loops.

**Cost.** Nothing blocks, and nothing runs in a thread: a sweep lists the children in
``/proc/self/task/<tid>/children`` (a small file per thread, ~9 µs each) and reads
``/proc/<pid>/stat`` of each child that is neither a registered plugin nor a watched process
(those are known to be alive; ~10 µs each). Measured: 0.2 ms for a daemon's 21 threads, 0.8 ms
with 256 children watched and 44 not, 3.3 ms for 300 children none of which could be watched;
at most one sweep per ``settle`` (20 a second). Without the ``children`` files (a kernel built
without ``CONFIG_PROC_CHILDREN``) a sweep peeks at zombies with ``waitid(WNOWAIT)`` instead,
every ``poll`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

log = logging.getLogger(__name__)

ZOMBIE_PEEKS = 1024
"""At most this many zombies reaped per sweep without ``children`` files (a bound, not a need)."""


class Child(Protocol):
    """What the registry reads of a started plugin (``asyncio.subprocess.Process``)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...


C = TypeVar("C", bound=Child)


class LivePlugins:
    """The plugins started and not yet reaped by their child watcher: left to it.

    One per process (:data:`LIVE_PLUGINS`), as the subreaper and the child watcher are; the
    executor registers through :meth:`spawned`, the reaper reads it and listens to it.
    """

    def __init__(self) -> None:
        self._running: dict[int, Child] = {}
        self._spawning = 0
        self.on_spawn: Callable[[int], object] | None = None
        """Called with each plugin's pid once it is registered (the reaper watches it)."""
        self.on_settled: Callable[[], None] | None = None
        """Called when the last spawn under way has returned (deferred leaders can go)."""

    async def spawned(self, spawn: Awaitable[C]) -> C:
        """Await ``spawn`` (a plugin's ``create_subprocess_exec``) and register the plugin.

        Counted as under way from before the fork to the registration, with no ``await``
        between the spawn's return and the registration: no moment exists at which the plugin
        is a zombie the reaper could take for an orphan.
        """
        self._spawning += 1
        try:
            child = await spawn
            self._prune()
            self._running[child.pid] = child
        finally:
            self._spawning -= 1
            if not self._spawning and self.on_settled is not None:
                self.on_settled()
        if self.on_spawn is not None:
            self.on_spawn(child.pid)
        return child

    def running(self, pid: int) -> bool:
        """Whether ``pid`` is a plugin its child watcher has not reaped yet."""
        child = self._running.get(pid)
        return child is not None and child.returncode is None

    @property
    def spawning(self) -> bool:
        """Whether a spawn is under way (a plugin whose pid is not registered yet may exist)."""
        return self._spawning > 0

    def _prune(self) -> None:
        """Forget the plugins already reaped (each spawn prunes, so the map stays as small as
        the number of plugins running)."""
        for pid in [pid for pid, child in self._running.items() if child.returncode is not None]:
            del self._running[pid]


LIVE_PLUGINS = LivePlugins()
"""The process's registry: :class:`multusd.cni.invoke.SubprocessExecutor` registers in it."""


@dataclass(frozen=True, slots=True)
class Stat:
    """What a sweep reads of a child in ``/proc/<pid>/stat``."""

    state: str
    ppid: int
    sid: int


class Verdict(enum.Enum):
    LEAVE = "not ours to reap"
    ADOPTED = "adopted: reap it once it ends"
    DEFER = "a session leader while a plugin's spawn is under way"


def verdict(pid: int, stat: Stat, session: int, plugins: LivePlugins) -> Verdict:
    """The rule of the module docstring, for child ``pid`` of the daemon (session ``session``)."""
    if stat.sid == session:
        return Verdict.LEAVE
    if stat.sid != pid:
        return Verdict.ADOPTED
    if plugins.running(pid):
        return Verdict.LEAVE
    return Verdict.DEFER if plugins.spawning else Verdict.ADOPTED


def read_stat(pid: int) -> Stat | None:
    """``/proc/<pid>/stat``'s state, ppid and session; ``None`` once the process is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # ``pid (comm) state ppid pgrp session ...``; comm may hold spaces and parentheses.
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 4:
        return None
    return Stat(fields[0].decode("ascii", "replace"), int(fields[1]), int(fields[3]))


def children() -> list[int] | None:
    """The daemon's children, from every thread's ``children`` file (an orphan goes to any
    live thread of its subreaper); ``None`` where the kernel has no such files."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    pids: list[int] = []
    found = False
    for tid in tids:
        try:
            fd = os.open(f"/proc/self/task/{tid}/children", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # a thread that ended, or no such files at all
        found = True
        try:
            # Read whole: pieces of a list that changed between them may miss a child, which
            # the next sweep finds.
            text = b""
            while chunk := os.read(fd, 65536):
                text += chunk
            pids.extend(int(pid) for pid in text.split())
        except OSError:
            pass
        finally:
            os.close(fd)
    return pids if found else None


class OrphanReaper:
    """Reaps every child the daemon adopts once it ends, never a plugin (the module's rule).

    :meth:`run` is the task; it installs itself on ``plugins`` while it runs and, when it is
    cancelled, takes its hooks back and closes every pidfd. :attr:`reaped` counts what it
    reaped (logged at debug by each sweep that reaped, and at verbose when it stops).
    """

    def __init__(
        self,
        plugins: LivePlugins = LIVE_PLUGINS,
        *,
        settle: float = 0.05,
        poll: float = 1.0,
        backstop: float = 10.0,
        max_watched: int = 256,
    ) -> None:
        self.plugins = plugins
        self.settle = settle
        self.poll = poll
        self.backstop = backstop
        self.max_watched = max_watched
        self.reaped = 0
        self._watched: dict[int, int] = {}  # pid -> its pidfd, registered with the loop
        self._pidfds = hasattr(os, "pidfd_open")
        self._wake = asyncio.Event()
        self._deferred = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session = os.getsid(0)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        plugins = self.plugins
        plugins.on_spawn, plugins.on_settled = self._watch, self._settled
        try:
            while True:
                self._wake.clear()
                more = self.sweep()
                await asyncio.sleep(self.settle)  # the ends of a burst: one sweep
                if self._wake.is_set():
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll if more else self.backstop):
                        await self._wake.wait()
        finally:
            plugins.on_spawn = plugins.on_settled = None
            for pid in list(self._watched):
                self._unwatch(pid)
            self._loop = None
            log.info("orphan reaper stopped: %d adopted process(es) reaped", self.reaped)

    def sweep(self) -> bool:
        """Reap the adopted children that ended, watch those still running; ``True`` when the
        next sweep must not wait for the backstop (something unwatched, a deferred leader)."""
        before = self.reaped
        self._deferred = False
        pids = children()
        more = self._sweep_zombies() if pids is None else self._sweep_children(pids)
        if self.reaped != before:
            log.debug(
                "reaped %d adopted process(es) (%d in all)", self.reaped - before, self.reaped
            )
        return more

    def _sweep_children(self, pids: Iterable[int]) -> bool:
        me = os.getpid()
        more = False
        for pid in pids:
            if pid in self._watched:
                continue  # alive until its pidfd says otherwise
            if self.plugins.running(pid):
                more = True  # the child watcher's, and its end wakes no one here
                continue
            stat = read_stat(pid)
            if stat is None or stat.ppid != me:
                continue  # gone since the listing
            judged = verdict(pid, stat, self._session, self.plugins)
            if judged is Verdict.LEAVE:
                continue
            if stat.state != "Z":
                more |= not self._watch(pid)
            elif judged is Verdict.DEFER:
                self._deferred = more = True
            else:
                self._reap(pid)
        return more

    def _sweep_zombies(self) -> bool:
        """Without ``children`` files: reap zombie children as ``waitid(WNOWAIT)`` shows them
        one at a time, up to the first that must be left (the next sweep, ``poll`` seconds on,
        goes on once its own reaper took it)."""
        me = os.getpid()
        for _ in range(ZOMBIE_PEEKS):
            try:
                peeked = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True
            if peeked is None:
                return True
            pid = peeked.si_pid
            try:
                stat = Stat("Z", me, os.getsid(pid))
            except ProcessLookupError:
                return True  # taken meanwhile: the next sweep goes on
            judged = verdict(pid, stat, self._session, self.plugins)
            if judged is not Verdict.ADOPTED:
                self._deferred = judged is Verdict.DEFER
                return True
            self._reap(pid)
        return True

    def _reap(self, pid: int) -> None:
        with contextlib.suppress(ChildProcessError):  # reaped meanwhile with its killed group
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                self.reaped += 1

    def _watch(self, pid: int) -> bool:
        """Be woken when ``pid`` ends; ``False`` when it cannot be watched (poll instead)."""
        loop = self._loop
        if pid in self._watched:
            return True
        if loop is None or not self._pidfds or len(self._watched) >= self.max_watched:
            return False
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._wake.set()  # gone already: the next sweep sees what it left
            return True
        except OSError as exc:
            if exc.errno == errno.ENOSYS:
                self._pidfds = False
                log.info(
                    "no pidfds (kernel before 5.3): adopted processes reaped every %gs", self.poll
                )
            return False
        try:
            loop.add_reader(fd, self._ended, pid)
        except (OSError, RuntimeError, ValueError):  # a loop that is closing
            os.close(fd)
            return False
        self._watched[pid] = fd
        return True

    def _ended(self, pid: int) -> None:
        self._unwatch(pid)
        self._wake.set()

    def _unwatch(self, pid: int) -> None:
        fd = self._watched.pop(pid, None)
        if fd is None:
            return
        if self._loop is not None:
            self._loop.remove_reader(fd)
        os.close(fd)

    def _settled(self) -> None:
        if self._deferred:
            self._wake.set()
