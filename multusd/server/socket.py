"""The unix socket: a private directory, a probe for a live daemon, and owner-only permissions.

asyncio's ``create_unix_server`` silently unlinks whatever socket is at the path, even one a
running daemon is serving; two daemons would then fight over a node. We bind the socket
ourselves after checking, under a umask so it is never briefly world-accessible.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from multusd.errors import StartupError


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
    """True if something accepts connections at ``socket_path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(socket_path)
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            return False
        raise
    finally:
        probe.close()
    return True


@dataclass(frozen=True, slots=True)
class BoundSocket:
    """A listening socket plus the identity of the file it created."""

    sock: socket.socket
    path: str
    inode: int

    def unlink(self) -> None:
        """Remove our socket file, unless another daemon has since replaced it."""
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(self.path).st_ino == self.inode:
                os.unlink(self.path)


def bind_socket(socket_path: str, backlog: int = 1024) -> BoundSocket:
    """A listening socket at ``socket_path`` with mode 0600; refuses to steal a live one."""
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
    old_umask = os.umask(0o177)
    try:
        sock.bind(socket_path)
        os.chmod(socket_path, 0o600)
        inode = os.lstat(socket_path).st_ino
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise StartupError(f"failed to listen on pod info socket: {exc}") from exc
    finally:
        os.umask(old_umask)
    sock.setblocking(False)
    return BoundSocket(sock, socket_path, inode)
