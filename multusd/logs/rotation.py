"""The log file's rotation, as upstream's lumberjack does it (``logOptions``,
docs/configuration.md).

By size, in the writer thread: a record that would take the file past its limit first moves it
to a backup named after the rotation time. Pruning (count and age limits) and gzip run in a
second "mill" thread, so a 100 MB compression does not hold up the writer either.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from multusd.logs.compress import GZ, gzip_file

if TYPE_CHECKING:
    from multusd.config.daemon import LogOptions

MEGABYTE = 1024 * 1024
"""Bytes per ``maxSize`` unit; a module constant (as lumberjack's) so tests can shrink it."""

_BACKUP_FORMAT = "%Y-%m-%dT%H-%M-%S"  # Go's "2006-01-02T15-04-05.000" without the millis


@dataclass(frozen=True, slots=True)
class Rotation:
    """Lumberjack's knobs. Zero or negative ``max_backups``/``max_age_days`` mean "no limit",
    as in lumberjack; ``max_bytes`` at or below zero means the 100 MB default."""

    max_bytes: int = 100 * MEGABYTE
    max_backups: int = 5
    max_age_days: float = 5
    compress: bool = True

    @classmethod
    def from_options(cls, options: LogOptions | None) -> Rotation:
        """Upstream's ``SetLogOptions``: its defaults (100 MB, 5 backups, 5 days, gzip),
        each overridden only by a key that is present."""
        if options is None:
            return cls(max_bytes=100 * MEGABYTE)
        size = options.max_size if options.max_size is not None and options.max_size > 0 else 100
        return cls(
            max_bytes=size * MEGABYTE,
            max_backups=5 if options.max_backups is None else options.max_backups,
            max_age_days=5 if options.max_age is None else options.max_age,
            compress=True if options.compress is None else options.compress,
        )


def backup_name(path: Path, when: datetime.datetime) -> Path:
    """``<dir>/<stem>-<UTC 2006-01-02T15-04-05.000><ext>``: lumberjack's backup name."""
    stamp = when.astimezone(datetime.UTC)
    text = f"{stamp.strftime(_BACKUP_FORMAT)}.{stamp.microsecond // 1000:03d}"
    return path.with_name(f"{path.stem}-{text}{path.suffix}")


def backup_time(path: Path, candidate: str) -> datetime.datetime | None:
    """The rotation time encoded in a backup's name (``.gz`` or not); ``None`` if the name
    is not one of ``path``'s backups. Lumberjack ages backups by this, not by mtime."""
    prefix, ext = f"{path.stem}-", path.suffix
    for suffix in (ext, ext + GZ):
        if candidate.startswith(prefix) and candidate.endswith(suffix):
            text = candidate[len(prefix) : len(candidate) - len(suffix)]
            with contextlib.suppress(ValueError):
                if len(text) == 23 and text[19] == "." and text[20:].isdigit():
                    base = datetime.datetime.strptime(text[:19], _BACKUP_FORMAT)
                    return base.replace(microsecond=int(text[20:]) * 1000, tzinfo=datetime.UTC)
    return None


class _Mill:
    """One background thread that runs ``job`` when asked; requests made while it runs
    coalesce into one more run (lumberjack's buffered ``millCh``)."""

    def __init__(self, job: Callable[[], None]) -> None:
        self._job = job
        self._wanted = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        self._wanted.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="multusd-logmill", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Finish every requested run, then stop."""
        self._closing = True
        self._wanted.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            with contextlib.suppress(OSError):  # a failed prune is retried on the next rotation
                self._job()
            if self._closing and not self._wanted.is_set():
                return


class RotatingFile(logging.Handler):
    """A log file with lumberjack's rotation, for the listener thread.

    * A record that would take the file past ``max_bytes`` first moves it to a backup
      (:func:`backup_name`) and starts a new one; an existing file is appended to unless it is
      already at the limit. Unlike lumberjack, a single record larger than the limit is still
      written (to a fresh file) rather than dropped, and a backup name already taken (two
      rotations in one millisecond) moves on by a millisecond instead of overwriting.
    * After opening or rotating, the mill keeps the newest ``max_backups`` backups, removes
      those rotated more than ``max_age_days`` ago, and gzips the rest when ``compress``.
    """

    def __init__(self, filename: str | os.PathLike[str], rotation: Rotation | None = None) -> None:
        super().__init__()
        self.path = Path(filename)
        self.rotation = rotation or Rotation()
        self._file: BinaryIO | None = None
        self._size = 0
        self._last_backup: datetime.datetime | None = None
        self._mill = _Mill(self._mill_once)

    @property
    def max_bytes(self) -> int:
        return self.rotation.max_bytes if self.rotation.max_bytes > 0 else 100 * MEGABYTE

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
            self._write(data)
        except Exception:
            self.handleError(record)

    def rotate(self) -> None:
        """Start a new file now (lumberjack's ``Rotate``)."""
        with self.lock or contextlib.nullcontext():
            self._close_file()
            self._open_new()
            self._mill.request()

    def close(self) -> None:
        with self.lock or contextlib.nullcontext():
            self._close_file()
        self._mill.close()
        super().close()

    # --- internals ---------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self._file is None:
            self._open_existing_or_new(len(data))
        elif self._size > 0 and self._size + len(data) > self.max_bytes:
            self._close_file()
            self._open_new()
            self._mill.request()
        assert self._file is not None
        self._file.write(data)
        self._size += len(data)

    def _open_existing_or_new(self, length: int) -> None:
        """Append to the file if it has room for ``length`` more bytes, else rotate it; then
        let the mill tidy up (lumberjack mills on every open, so limits changed by a restart
        apply at once)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = None
        if size is None or (size > 0 and size + length >= self.max_bytes):
            self._open_new()
        else:
            try:
                self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 (kept open)
                self._size = size
            except OSError:
                self._open_new()
        self._mill.request()

    def _open_new(self) -> None:
        """Move the current file (if any) to a backup, keeping its mode; open an empty one."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = 0o600
        with contextlib.suppress(FileNotFoundError):
            mode = self.path.stat().st_mode & 0o7777
            self.path.rename(self._free_backup_name())
        fd = os.open(self.path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, mode)
        self._file = open(fd, "ab", buffering=0)  # noqa: SIM115 (kept open)
        self._size = 0

    def _free_backup_name(self) -> Path:
        """A backup name strictly later than the previous one: two rotations in one
        millisecond, or a name the mill just freed, must not reorder or overwrite backups."""
        now = datetime.datetime.now(datetime.UTC)
        when = now.replace(microsecond=now.microsecond // 1000 * 1000)  # names hold millis
        if self._last_backup is not None and when <= self._last_backup:
            when = self._last_backup + datetime.timedelta(milliseconds=1)
        while (name := backup_name(self.path, when)).exists() or name.with_name(
            name.name + GZ
        ).exists():
            when += datetime.timedelta(milliseconds=1)
        self._last_backup = when
        return name

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _backups(self) -> list[tuple[datetime.datetime, Path]]:
        """Every backup of this file, newest first."""
        found = []
        for entry in os.scandir(self.path.parent):
            when = backup_time(self.path, entry.name)
            if when is not None and entry.is_file(follow_symlinks=False):
                found.append((when, Path(entry.path)))
        found.sort(key=lambda item: item[0], reverse=True)
        return found

    def _mill_once(self) -> None:
        """Lumberjack's ``millRunOnce``: count limit, then age limit, then compression."""
        rotation = self.rotation
        if rotation.max_backups <= 0 and rotation.max_age_days <= 0 and not rotation.compress:
            return
        files = self._backups()
        remove: list[Path] = []
        if 0 < rotation.max_backups < len(files):
            kept: set[str] = set()
            remaining = []
            for when, path in files:
                kept.add(path.name.removesuffix(GZ))  # x.log and x.log.gz count once
                if len(kept) > rotation.max_backups:
                    remove.append(path)
                else:
                    remaining.append((when, path))
            files = remaining
        if rotation.max_age_days > 0:
            cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(
                days=rotation.max_age_days
            )
            remove += [path for when, path in files if when < cutoff]
            files = [(when, path) for when, path in files if when >= cutoff]
        for path in remove:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if rotation.compress:
            for _, path in files:
                if path.suffix != GZ:
                    with contextlib.suppress(FileNotFoundError):
                        gzip_file(path)
