"""A running plugin's stdout and stderr, read to their ends with a bound on what is kept.

libcni reads all that a plugin prints into memory, and so did ``proc.communicate()`` here: a
delegate that printed a 10 MiB result took the daemon's high-water mark from 32 to 114 MiB (the
bytes, their join, the decoded JSON), which inside the DaemonSet's memory limit is the daemon
OOM-killed, the runtime's DEL finding no daemon, and the pod's cluster address leaked in
host-local. So each pipe has a reader of its own from the moment the plugin starts:

* stdout, the plugin's result (or error object), is kept up to :data:`MAX_STDOUT` bytes; one
  byte more and :meth:`PluginOutput.ended` raises :class:`OutputTooLarge`, for the executor to
  kill and reap the plugin's process group (:mod:`multusd.cni.invoke`);
* stderr, diagnostics nobody parses, is kept as its last :data:`STDERR_TAIL` bytes (the end of
  a log is the part that says why it failed); the rest is counted and dropped.

Both pipes are read to their end whatever happens: past the cap, and while the plugin is being
killed. A plugin blocked on a full pipe never gets to exit; and asyncio (3.11) resolves a
``Process.wait()`` begun before the exit only once every pipe has closed, so a pipe left unread
holds the reaping of a plugin that ignores SIGTERM forever (seen: ``kill_and_reap`` never
returned). Only :meth:`PluginOutput.close`, once the plugin is reaped, stops a reader still
running.
"""

from __future__ import annotations

import asyncio

KiB = 1 << 10
MiB = 1 << 20

MAX_STDOUT = 1 * MiB
"""The most a plugin may print on stdout: its result, or its error object.

Sized from what real plugins print. Debian's containernetworking-plugins 1.1.1 (``/usr/lib/cni``),
run for ADD (CNI 1.0.0) in scratch namespaces: ``host-local`` 232 bytes (380 dual-stack),
``static`` 353, ``loopback`` 398, ``macvlan`` and ``host-device`` 429, ``ptp`` 525, ``bridge``
with host-local 614 (1,042 dual-stack with a cluster's DNS settings); ``tuning``,
``bandwidth``, ``portmap``, ``firewall`` and ``sbr`` pass the result they are given on. A few
hundred bytes to a few KiB, since a result lists one attachment's interfaces, addresses, routes
and DNS. A mebibyte is a thousand times that, more than any result a pod can use (its
network-status annotation must fit in the API server's 256 KiB for all of a pod's annotations),
and little enough that ``maxActiveRequests`` plugins at the cap at once cost the daemon a few
MiB, not its memory limit."""

STDERR_TAIL = 64 * KiB
"""How much of a plugin's stderr is kept: its last 64 KiB. Plugins print a line or two there
(libcni shows stderr only when a failed plugin printed nothing on stdout); of a longer log, the
end is the part that says why it failed."""

_CHUNK = 64 * KiB
"""One read: asyncio's stream buffer limit, past which it stops reading the pipe until drained."""


class OutputTooLarge(Exception):
    """The plugin printed more than ``cap`` bytes on stdout."""

    def __init__(self, cap: int) -> None:
        super().__init__(cap)
        self.cap = cap


class PluginOutput:
    """One plugin's two pipes, each read by its own task from the moment this is made."""

    def __init__(
        self,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        *,
        max_stdout: int = MAX_STDOUT,
        stderr_tail: int = STDERR_TAIL,
    ) -> None:
        self.max_stdout = max_stdout
        self.stderr_tail = stderr_tail
        self.stderr_total = 0  # bytes printed on stderr, the dropped ones included
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._over: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._readers = (
            asyncio.ensure_future(self._read_stdout(stdout)),
            asyncio.ensure_future(self._read_stderr(stderr)),
        )

    @property
    def stdout(self) -> bytes:
        return bytes(self._stdout)

    @property
    def stderr(self) -> bytes:
        """The last :data:`STDERR_TAIL` bytes of stderr (all of it, when it was no longer)."""
        return bytes(self._stderr)

    @property
    def stderr_dropped(self) -> int:
        """How many of stderr's first bytes were dropped to keep its tail."""
        return self.stderr_total - len(self._stderr)

    async def ended(self) -> None:
        """Until both pipes have ended; :class:`OutputTooLarge` as soon as stdout passes its cap.

        The readers go on either way, and when this is cancelled: only :meth:`close` stops
        them (``asyncio.wait`` neither cancels what it waits for nor starts tasks).
        """
        pending = [reader for reader in self._readers if not reader.done()]
        while pending and not self._over.done():
            await asyncio.wait((*pending, self._over), return_when=asyncio.FIRST_COMPLETED)
            pending = [reader for reader in pending if not reader.done()]
        if self._over.done():
            raise OutputTooLarge(self.max_stdout)
        for reader in self._readers:
            reader.result()  # a reader's own failure (a read error) is the run's

    async def close(self) -> None:
        """Stop the readers still running and wait until they are gone.

        Once the plugin's group is reaped its pipes have ended and the readers are finishing
        anyway; one is left waiting only when a process outside the group holds a pipe open.
        """
        if not all(reader.done() for reader in self._readers):
            for reader in self._readers:
                reader.cancel()
            await asyncio.wait(self._readers)
        for reader in self._readers:
            if not reader.cancelled():
                reader.exception()  # retrieved, or asyncio would log it as never retrieved

    async def _read_stdout(self, stream: asyncio.StreamReader) -> None:
        kept = self._stdout
        while chunk := await stream.read(_CHUNK):
            if self._over.done():
                continue  # past the cap: drained, so that the plugin can exit, and not kept
            if len(kept) + len(chunk) > self.max_stdout:
                kept.clear()  # nobody will read it: given back now
                self._over.set_result(None)
                continue
            kept += chunk

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        tail = self._stderr
        while chunk := await stream.read(_CHUNK):
            self.stderr_total += len(chunk)
            tail += chunk
            if len(tail) > self.stderr_tail:
                del tail[: len(tail) - self.stderr_tail]
