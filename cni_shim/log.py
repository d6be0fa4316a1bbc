"""Upstream's logging format for the shim: ``<RFC3339 local time> [<level>] <message>``.

Only what the shim needs: stderr and/or one file, levels panic < error < verbose < debug,
default ``panic`` (so errors are silent unless asked for). No rotation: the shim writes a few
lines per invocation; rotation of a shared file is the daemon's job.
"""

from __future__ import annotations

import io
import posix
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO, TextIO

PANIC, ERROR, VERBOSE, DEBUG = 0, 1, 2, 3
_LEVEL_NAMES = ("panic", "error", "verbose", "debug")
_LEVELS = {name: i for i, name in enumerate(_LEVEL_NAMES)}


def timestamp(now: float | None = None) -> str:
    """Go's ``time.RFC3339`` in the local zone (``Z`` for UTC, else ``+hh:mm``)."""
    t = time.localtime(now)
    off = t.tm_gmtoff or 0
    if off == 0:
        zone = "Z"
    else:
        sign = "+" if off > 0 else "-"
        off = abs(off)
        zone = f"{sign}{off // 3600:02d}:{off % 3600 // 60:02d}"
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + zone


class Logger:
    """A per-invocation logger configured from the shim's stdin config."""

    def __init__(self, stderr: TextIO | BinaryIO) -> None:
        self._stderr = stderr
        self.level = PANIC
        self.to_stderr = False
        self.file: str | None = None

    def set_level(self, name: str) -> None:
        """Case-insensitive; an unknown name is reported on stderr and ignored (as upstream)."""
        level = _LEVELS.get(name.lower())
        if level is None:
            self._write_stderr(f"multus logging: cannot set logging level to {name}\n")
            return
        self.level = level

    def _write_stderr(self, text: str) -> None:
        try:
            if isinstance(self._stderr, io.TextIOBase):
                self._stderr.write(text)
            else:
                self._stderr.write(text.encode("utf-8", "replace"))  # type: ignore[arg-type]
            self._stderr.flush()
        except (OSError, ValueError):
            pass

    def _write_file(self, text: str) -> None:
        assert self.file is not None
        try:
            # Not pathlib (re, fnmatch, urllib) nor os (~2 ms): too slow for the shim's start.
            parent = self.file.rpartition("/")[0]
            if parent and not _is_dir(parent):
                import os

                os.makedirs(parent, mode=0o755, exist_ok=True)
            flags = posix.O_WRONLY | posix.O_APPEND | posix.O_CREAT | posix.O_CLOEXEC
            fd = posix.open(self.file, flags, 0o600)
            try:
                posix.write(fd, text.encode("utf-8", "replace"))
            finally:
                posix.close(fd)
        except OSError:
            pass  # logging must never turn a CNI success into a failure

    def log(self, level: int, message: str) -> None:
        if level > self.level or not (self.to_stderr or self.file):
            return
        line = f"{timestamp()} [{_LEVEL_NAMES[level]}] {message}\n"
        if self.to_stderr:
            self._write_stderr(line)
        if self.file:
            self._write_file(line)

    def error(self, message: str) -> None:
        self.log(ERROR, message)

    def verbose(self, message: str) -> None:
        self.log(VERBOSE, message)

    def debug(self, message: str) -> None:
        self.log(DEBUG, message)


def _is_dir(path: str) -> bool:
    try:
        return posix.stat(path).st_mode & 0o170000 == 0o040000  # S_ISDIR, without ``stat``
    except OSError:
        return False
