"""Which connections the daemon reads now, and which wait unread until it has room.

A request the daemon has read costs it memory for as long as it is in the daemon: aiohttp's
protocol, parser and request objects, the body, the decoded config, the command's state. Under
upstream's 50 Mi limit a burst of 200 ADDs, all read at once, grew our daemon from 30 to 44 MiB
of anonymous memory, and with the kubelet's probes starting the OOM killer took it
(docs/performance.md, "Under a memory limit"). A connection the daemon has not read costs it
nothing: the kernel charges the socket and the bytes written into it to the client (the shim,
in the container runtime's cgroup).

So :class:`Intake` accepts every connection at once -- the listen backlog never fills, which
matters because Go dials a unix socket non-blocking and fails at once with ``EAGAIN`` when it is
full -- peeks at the first bytes and:

* serves at once, with no slot, everything that is not a CNI request (``POST /cni`` or
  ``/delegate``): the probes, the shims' readiness polls, bad requests, which aiohttp answers;
* reads a CNI request only while fewer than ``maxActiveRequests`` are in the daemon; the rest
  wait unread, in arrival order, DELs first. A DEL may also use a reserve of slots of its own
  (half as many again), so a node whose ADDs all hang still reads its DELs, which supersede them
  (``server.concurrency``); the ADDs and CHECKs of that container still waiting unread are
  superseded at once, as the daemon's queue would supersede them once read;
* answers code 11 at once when ``maxPendingRequests`` requests are in the daemon and waiting;
* answers code 11 an ADD or CHECK that has waited unread for ``requestTimeoutSeconds``: the
  requests ahead of it are stuck (plugins waiting for memory under the container's limit, or
  hanging until their deadlines), and a request the daemon would only start after the time it
  may take in all is better retried by the runtime than left to the runtime's own timeout.
  DELs do not expire: they go first and have a reserve, and a DEL refused is a DEL the runtime
  may not ask again (the shim answers 0 to daemon errors on DEL, upstream's rule);
* answers the waiting ones code 11 when the daemon stops (the listener closes, as before).

Peeking tells the command and the container ID only as hints (the env object comes first in
the bodies both shims send, sorted, with ``CNI_COMMAND`` and ``CNI_CONTAINERID`` near its
start); a request whose hint is missing or wrong is still decoded, validated and queued as
usual once read: only its place in the wait depends on the hint.

Every response closes its connection (upstream's server disables keep-alive too), so a
connection carries one request and its slot ends with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import re
import select
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate

from aiohttp import web

from cni_shim.errors import TRY_AGAIN_LATER, CNIError
from multusd.server.concurrency import SHUTTING_DOWN, SUPERSEDED, too_many_requests
from multusd.server.handlers import error_response

log = logging.getLogger(__name__)

PEEK_BYTES = 4096
"""How much of a request is looked at before it is read: the request line, the headers and
the start of the body, where the env object's ``CNI_*`` keys are."""
INCOMPLETE_RETRY = 0.01
"""A request line that has not arrived whole is looked at again after this long (and served
as it is once ``requestHeaderTimeoutSeconds`` has passed: aiohttp times it out)."""
ACCEPT_BATCH = 64
"""Connections accepted per wake-up of the listening socket (others wait their turn)."""
EMFILE_PAUSE = 0.1
"""Out of file descriptors: how long accepting pauses before it is tried again."""
DRAIN_LIMIT = 1 << 20
"""What is read of a request answered without being served: the rest is left unread."""

_CNI_PATHS = (b"/cni", b"/delegate")
_CNI_LINE_STARTS = (b"POST /cni", b"POST /delegate")
_COMMAND = re.compile(rb'"CNI_COMMAND":"([A-Za-z]{1,16})"')
_CONTAINER = re.compile(rb'"CNI_CONTAINERID":"([^"\\]{1,256})"')

Serve = Callable[[socket.socket, "Callable[[], None] | None", "float | None"], None]
"""Hands a connection to the HTTP server; the callback (if any) is called once it has ended, and
the time (the loop's) is when a CNI request arrived: its deadline counts from then, time spent
waiting unread included (``None`` for what is not a CNI request)."""


@dataclass(frozen=True, slots=True)
class Hint:
    """What a peek at a request tells: whether it is a CNI request and, if so, its command
    and container (``b""`` when not seen)."""

    cni: bool
    command: bytes = b""
    container: bytes = b""

    @property
    def is_del(self) -> bool:
        return self.command == b"DEL"


def read_hint(head: bytes) -> Hint | None:
    """The hint of a request that starts with ``head``; ``None`` while it may still become a
    CNI request line (it is a beginning of one, not yet whole)."""
    line, crlf, _ = head.partition(b"\r\n")
    if not crlf:
        maybe = any(
            prefix.startswith(head) or head.startswith(prefix) for prefix in _CNI_LINE_STARTS
        )
        return None if maybe else Hint(cni=False)
    method, _, rest = line.partition(b" ")
    path = rest.partition(b" ")[0].partition(b"?")[0]
    if method != b"POST" or path not in _CNI_PATHS:
        return Hint(cni=False)
    command = _COMMAND.search(head)
    container = _CONTAINER.search(head)
    return Hint(
        cni=True,
        command=command.group(1) if command else b"",
        container=container.group(1) if container else b"",
    )


def peer_closed(sock: socket.socket) -> bool:
    """Whether the peer closed its socket entirely (``POLLHUP``), e.g. the shim was killed."""
    poller = select.poll()
    poller.register(sock.fileno(), 0)  # POLLHUP and POLLERR are always reported
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


def waited_too_long(seconds: float, active: int) -> CNIError:
    """The refusal of a request that waited unread for ``requestTimeoutSeconds`` (code 11)."""
    return CNIError(
        TRY_AGAIN_LATER,
        f"waited {seconds:.0f}s unread behind {active} requests in the daemon "
        "(requestTimeoutSeconds); try again later",
    )


@dataclass(eq=False, slots=True)
class _Waiting:
    sock: socket.socket
    hint: Hint
    since: float
    """The loop's time when it began to wait."""


@dataclass
class IntakeLimits:
    active: int
    """``maxActiveRequests``: CNI requests read and in the daemon at once."""
    pending: int
    """``maxPendingRequests``: CNI requests in the daemon and waiting unread, at most."""
    header_timeout: float
    """``requestHeaderTimeoutSeconds``: how long a request line may take to arrive."""
    wait_timeout: float | None = None
    """``requestTimeoutSeconds``: how long an ADD or CHECK may wait unread (module docstring)."""

    @property
    def del_reserve(self) -> int:
        """Slots only DELs may take, above ``active``."""
        return max(1, self.active // 2)


@dataclass(eq=False)
class Intake:
    """Accepts connections on a listening socket and hands them to ``serve`` in their turn."""

    listener: socket.socket
    serve: Serve
    limits: IntakeLimits
    active: int = 0
    """CNI requests handed to the server and not yet ended."""
    _dels: deque[_Waiting] = field(default_factory=deque)
    _others: deque[_Waiting] = field(default_factory=deque)
    _peeking: dict[socket.socket, asyncio.TimerHandle] = field(default_factory=dict)
    """Connections not yet classified, with their header-timeout timers."""
    _retries: set[asyncio.TimerHandle] = field(default_factory=set)
    _expiry: asyncio.TimerHandle | None = None
    """Armed while ADDs or CHECKs wait: when the oldest one has waited ``wait_timeout``."""
    _loop: asyncio.AbstractEventLoop | None = None
    _accepting: bool = False

    @property
    def waiting(self) -> int:
        """CNI requests waiting unread."""
        return len(self._dels) + len(self._others)

    @property
    def expires_at(self) -> float | None:
        """When (the loop's time) the oldest waiting ADD or CHECK is answered code 11; ``None``
        while no waiting request can expire (none waits, only DELs do, or no timeout is set).
        Shows that a request left waiting is not timed, where waiting to see would only show
        that it was not timed *yet*."""
        return self._expiry.when() if self._expiry is not None else None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.listener.setblocking(False)
        self._accepting = True
        self._loop.add_reader(self.listener.fileno(), self._accept)

    def close(self) -> None:
        """Stop accepting; answer the waiting requests code 11; drop unclassified connections."""
        loop = self._loop
        if loop is None or not self._accepting:
            return
        self._accepting = False
        loop.remove_reader(self.listener.fileno())
        self.listener.close()
        for handle in self._retries:
            handle.cancel()
        self._retries.clear()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        for sock in list(self._peeking):
            self._forget(sock)
            sock.close()
        for queue in (self._dels, self._others):
            while queue:
                self._answer(queue.popleft().sock, SHUTTING_DOWN)

    # --- accepting and looking ---------------------------------------------------------------

    def replace_listener(self, listener: socket.socket) -> None:
        """Accept from ``listener`` from now on, in place of the socket whose file was lost
        (``server.socketguard``): nothing can connect to the old one any more, but what had
        connected before its file went is still in its backlog, and is taken first."""
        old, self.listener = self.listener, listener
        listener.setblocking(False)
        loop = self._loop
        if loop is None or not self._accepting:
            return  # not started, or closed: the owner closes the new socket
        if loop.remove_reader(old.fileno()):  # else paused (out of fds): the resume adds it
            loop.add_reader(listener.fileno(), self._accept)
        self._take(old, None)
        old.close()

    def _accept(self) -> None:
        self._take(self.listener, ACCEPT_BATCH)

    def _take(self, listener: socket.socket, limit: int | None) -> None:
        """Accept up to ``limit`` connections (all that are queued: ``None``) and look at
        each as it sends."""
        loop = self._loop
        assert loop is not None
        taken = 0
        while limit is None or taken < limit:
            taken += 1
            try:
                sock, _addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("cannot accept connections: %s; pausing %gs", exc, EMFILE_PAUSE)
                    if listener is self.listener:
                        loop.remove_reader(listener.fileno())
                        self._later(EMFILE_PAUSE, self._resume_accepting)
                    return
                log.warning("accept failed: %s", exc)
                return
            sock.setblocking(False)
            # Silent past the header timeout: closed, as aiohttp closes an idle connection.
            self._peeking[sock] = loop.call_later(
                self.limits.header_timeout, functools.partial(self._idle, sock)
            )
            loop.add_reader(sock.fileno(), self._look, sock)

    def _resume_accepting(self) -> None:
        if self._accepting and self._loop is not None:
            self._loop.add_reader(self.listener.fileno(), self._accept)

    def _look(self, sock: socket.socket) -> None:
        loop = self._loop
        assert loop is not None
        try:
            head = sock.recv(PEEK_BYTES, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            head = b""
        if not head:  # closed before sending anything
            self._forget(sock)
            sock.close()
            return
        hint = read_hint(head)
        if hint is None and len(head) < PEEK_BYTES:
            loop.remove_reader(sock.fileno())  # look again shortly, not on every wake-up
            self._later(INCOMPLETE_RETRY, functools.partial(self._look_again, sock))
            return
        self._forget(sock)
        if hint is None or not hint.cni:
            self.serve(sock, None, None)
            return
        self._arrive(_Waiting(sock, hint, loop.time()))

    def _idle(self, sock: socket.socket) -> None:
        """The header timeout passed while looking: a silent connection is closed, as aiohttp
        closes one; one that sent a beginning goes to aiohttp, which answers or times it out."""
        if sock not in self._peeking:
            return
        self._forget(sock)
        try:
            sent = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            sent = b""
        if sent:
            self.serve(sock, None, None)
        else:
            sock.close()

    def _look_again(self, sock: socket.socket) -> None:
        if sock in self._peeking and self._loop is not None:
            self._loop.add_reader(sock.fileno(), self._look, sock)

    def _forget(self, sock: socket.socket) -> None:
        timer = self._peeking.pop(sock, None)
        if timer is not None and self._loop is not None:
            timer.cancel()
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(sock.fileno())

    def _later(self, delay: float, callback: Callable[[], None]) -> None:
        loop = self._loop
        assert loop is not None
        handle: asyncio.TimerHandle

        def run() -> None:
            self._retries.discard(handle)
            callback()

        handle = loop.call_later(delay, run)
        self._retries.add(handle)

    # --- waiting and serving -----------------------------------------------------------------

    def _arrive(self, item: _Waiting) -> None:
        if item.hint.is_del:
            self._supersede_waiting(item.hint.container)
        if self._may_serve(item.hint.is_del):
            self._hand(item)
        elif self.active + self.waiting >= self.limits.pending:
            self._answer(item.sock, too_many_requests(self.limits.pending))
        elif item.hint.is_del:
            self._dels.append(item)
        else:
            self._others.append(item)
            self._arm_expiry()

    def _may_serve(self, is_del: bool) -> bool:
        if is_del:
            return self.active < self.limits.active + self.limits.del_reserve
        return not self._dels and self.active < self.limits.active

    def _supersede_waiting(self, container: bytes) -> None:
        """A DEL arrived: the ADDs and CHECKs of its container still waiting unread end now."""
        if not container:
            return
        kept: deque[_Waiting] = deque()
        for item in self._others:
            if item.hint.container == container and item.hint.command in (b"ADD", b"CHECK"):
                log.info(
                    "container %s: a waiting %s is superseded by a DEL",
                    container.decode("ascii", "replace"), item.hint.command.decode(),
                )  # fmt: skip
                self._answer(item.sock, SUPERSEDED)
            else:
                kept.append(item)
        self._others = kept

    def _arm_expiry(self) -> None:
        """Time the oldest waiting ADD or CHECK out, if the timer is not armed already."""
        timeout = self.limits.wait_timeout
        if self._expiry is not None or timeout is None or not self._others:
            return
        loop = self._loop
        assert loop is not None
        self._expiry = loop.call_at(self._others[0].since + timeout, self._expire)

    def _expire(self) -> None:
        """Answer code 11 to every ADD or CHECK that has waited ``wait_timeout``; re-arm."""
        self._expiry = None
        timeout = self.limits.wait_timeout
        loop = self._loop
        assert timeout is not None and loop is not None
        now = loop.time()
        while self._others and now - self._others[0].since >= timeout:
            item = self._others.popleft()
            log.warning(
                "a %s waited %.0fs unread; answered code 11",
                (item.hint.command or b"request").decode("ascii", "replace"), now - item.since,
            )  # fmt: skip
            self._answer(item.sock, waited_too_long(now - item.since, self.active))
        self._arm_expiry()

    def _hand(self, item: _Waiting) -> None:
        self.active += 1
        ended = False

        def release() -> None:
            nonlocal ended
            if not ended:
                ended = True
                self.active -= 1
                self._pump()

        try:
            self.serve(item.sock, release, item.since)
        except Exception:
            release()
            raise

    def _pump(self) -> None:
        """A slot ended: serve the next waiting requests (DELs first) that fit."""
        while self._accepting:
            queue = self._dels if self._dels else self._others
            if not queue or not self._may_serve(queue is self._dels):
                return
            item = queue.popleft()
            if peer_closed(item.sock):  # its shim was killed while it waited
                item.sock.close()
                continue
            self._hand(item)

    def _answer(self, sock: socket.socket, err: CNIError) -> None:
        """Answer a request without serving it: read what is there, write the error, close.

        Reading first makes the close a clean EOF for the client (closing a unix socket with
        unread data resets the peer)."""
        with contextlib.suppress(OSError):
            taken = 0
            while taken < DRAIN_LIMIT:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                taken += len(chunk)
        with contextlib.suppress(OSError):
            sock.send(on_the_wire(error_response(err)))
        sock.close()


def on_the_wire(response: web.Response) -> bytes:
    """``response`` as HTTP/1.1 bytes, for a request answered without being served (no aiohttp
    protocol is made for it): its status, headers and body, and ``Connection: close``."""
    body = response.body if isinstance(response.body, bytes) else b""
    lines = [f"HTTP/1.1 {response.status} {response.reason}"]
    lines += [f"{name}: {value}" for name, value in response.headers.items()]
    lines += [
        f"Content-Length: {len(body)}",
        f"Date: {formatdate(usegmt=True)}",
        "Connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body
