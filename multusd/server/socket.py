"""The unix socket: a private directory, one daemon per socket path, and owner-only permissions.

asyncio's ``create_unix_server`` silently unlinks whatever socket is at the path, even one a
running daemon is serving; two daemons would then fight over a node. We bind the socket
ourselves after checking, with its mode set before the bind so it is never briefly
world-accessible.

A live daemon is not only a file that answers: the file can be removed while the daemon runs
(``rm -rf`` of ``socketDir``, a cleaner of ``/run``), and a second daemon would then find
nothing at the path and start beside the first. So each daemon also holds an
:class:`InstanceLock` that no file operation can take away: a Linux abstract unix socket named
after the socket path.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from multusd.errors import StartupError

LOCK_PREFIX = "multusd:"
"""The abstract socket's name is this and the socket path's ``realpath``."""
_ABSTRACT_MAX = 107
"""``sun_path`` holds 108 bytes; an abstract name takes all but its leading NUL."""
_PEERCRED = struct.Struct("3i")
"""``struct ucred``: pid, uid, gid."""


def prepare_socket_dir(socket_dir: str) -> None:
    """Create the directory (0700), or tighten an existing one to 0700.

    Upstream ``rm -rf``s the directory first, which destroys anything else an operator keeps
    there; we only touch our socket file (see docs/compatibility.md).
    """
    path = Path(socket_dir)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)
    except OSError as exc:
        raise StartupError(
            f"failed to create pod info socket directory {socket_dir}: {exc}"
        ) from exc


def is_live(socket_path: str, timeout: float = 1.0) -> bool:
    """True if something accepts connections at ``socket_path``.

    A listener whose backlog is full (``EAGAIN`` on a unix socket, or no room within
    ``timeout``) is live too: busy, not gone.
    """
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(socket_path)
    except TimeoutError:
        return True
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            return False
        if exc.errno == errno.EAGAIN:
            return True
        raise
    finally:
        probe.close()
    return True


def lock_name(socket_path: str) -> bytes:
    """The abstract socket a daemon serving ``socket_path`` holds (with its leading NUL).

    ``realpath``, so that ``/var/run/multus`` and ``/run/multus`` (a symlink in most images)
    are one daemon's; a path too long for an abstract name is hashed.
    """
    real = os.path.realpath(socket_path)
    name = f"{LOCK_PREFIX}{real}".encode()
    if len(name) > _ABSTRACT_MAX:
        name = f"{LOCK_PREFIX}sha256:{hashlib.sha256(real.encode()).hexdigest()}".encode()
    return b"\0" + name


class InstanceLock:
    """One daemon per socket path, held for the daemon's life whatever happens to its files.

    An abstract unix socket (Linux) has no file: nothing but the process's end (a kill
    included) releases its name, and a second ``bind`` of the name fails with ``EADDRINUSE``.
    It is per network namespace: the DaemonSet runs with ``hostNetwork``, so every daemon of a
    node shares it (a daemon in a namespace of its own is still refused by the live socket,
    :func:`bind_socket`). It listens, so that the daemon refused can ask the kernel who holds
    it (``SO_PEERCRED``); connections are accepted and closed at once (:meth:`answer`), so the
    backlog never fills. Like every socket Python makes it is close-on-exec: a plugin the
    daemon started, orphaned and still running, does not keep it.
    """

    def __init__(self, sock: socket.socket, name: bytes) -> None:
        self._sock = sock
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def acquire(cls, socket_path: str) -> InstanceLock:
        """Take the lock of ``socket_path``; ``StartupError`` (exit 3) naming the holder."""
        name = lock_name(socket_path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(name)
            sock.listen(8)
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise StartupError(
                    f"failed to listen on pod info socket: cannot hold {_shown(name)}: {exc}"
                ) from exc
            raise StartupError(
                f"failed to listen on pod info socket: another daemon is serving {socket_path} "
                f"({_holder(name)}holding {_shown(name)}), even if its socket file is gone"
            ) from exc
        sock.setblocking(False)
        return cls(sock, name)

    def answer(self, loop: asyncio.AbstractEventLoop) -> None:
        """Accept and close what connects (a refused daemon asking who holds the lock)."""
        self._loop = loop
        loop.add_reader(self._sock.fileno(), self._accept)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self._sock.accept()
            conn.close()

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._sock.fileno())
        self._loop = None
        self._sock.close()


def _shown(name: bytes) -> str:
    """An abstract name as ``ss -xlp`` shows it: ``@`` for the leading NUL."""
    return "@" + name[1:].decode("utf-8", "replace")


def _holder(name: bytes) -> str:
    """``"pid N, "`` of the process holding the lock ``name``, or ``""`` when the kernel does
    not say (a process in another PID namespace shows as pid 0)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(name)
        pid, _uid, _gid = _PEERCRED.unpack(
            probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
    except OSError:
        return ""
    finally:
        probe.close()
    return f"pid {pid}, " if pid > 0 else ""


@dataclass(frozen=True, slots=True)
class BoundSocket:
    """A listening socket plus the identity of the file it created."""

    sock: socket.socket
    path: str
    inode: int

    def unlink(self) -> None:
        """Remove our socket file, unless another daemon has since replaced it (or it is gone,
        its directory with it)."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            if os.lstat(self.path).st_ino == self.inode:
                os.unlink(self.path)

    def in_place(self) -> bool:
        """Whether the path still names our socket (blocking: one ``lstat``); ``False`` when
        it cannot be looked at (gone, its directory replaced by a file, no permission)."""
        try:
            st = os.lstat(self.path)
        except OSError:
            return False
        return stat.S_ISSOCK(st.st_mode) and st.st_ino == self.inode


def bind_socket(socket_path: str, backlog: int = 1024) -> BoundSocket:
    """A listening socket at ``socket_path`` with mode 0600; refuses to steal a live one.

    The mode is given to the socket before the bind (Linux creates the file with the socket's
    mode less the umask), not through the umask: the umask is the process's, and a socket bound
    again while serving (``server.socketguard``) is bound in a worker thread while other
    threads create files and directories.
    """
    try:
        mode = os.lstat(socket_path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None:
        if not stat.S_ISSOCK(mode):
            raise StartupError(
                f"failed to listen on pod info socket: {socket_path} is not a socket"
            )
        if is_live(socket_path):
            raise StartupError(
                f"failed to listen on pod info socket: another daemon is serving {socket_path}"
            )
        os.unlink(socket_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.fchmod(sock.fileno(), 0o600)
        sock.bind(socket_path)
        os.chmod(socket_path, 0o600)
        inode = os.lstat(socket_path).st_ino
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise StartupError(f"failed to listen on pod info socket: {exc}") from exc
    sock.setblocking(False)
    return BoundSocket(sock, socket_path, inode)
