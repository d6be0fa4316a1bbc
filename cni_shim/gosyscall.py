"""Go's texts for what the system reports: ``syscall.Errno.Error()`` and ``exec.ExitError``.

Upstream's messages end in these (``dial unix …: connect: connection refused``, ``open …: no
such file or directory``, ``fork/exec …: exec format error``, ``signal: killed``), and runtimes,
logs and tests compare them; Python's own texts differ (``[Errno 2] No such file or
directory``). One home for the shim's transport errors and the daemon's file, netlink and
plugin errors. Cheap to import: ``signal`` (which loads ``enum``, milliseconds at the shim's
start) is imported by :func:`exit_text` only, which only the daemon calls.
"""

from __future__ import annotations

import posix


def errno_text(errno: int | None) -> str:
    """Go's ``syscall.Errno.Error()``: the C text with a lower-case first letter."""
    if errno is None:
        return "unknown error"
    text = posix.strerror(errno)
    return text[:1].lower() + text[1:]


def exit_text(returncode: int) -> str:
    """Go's ``exec.ExitError`` text: ``exit status 1``, ``signal: killed``."""
    if returncode >= 0:
        return f"exit status {returncode}"
    import signal

    try:
        name = signal.strsignal(-returncode) or f"signal {-returncode}"
    except ValueError:
        name = f"signal {-returncode}"
    return "signal: " + name[:1].lower() + name[1:]
