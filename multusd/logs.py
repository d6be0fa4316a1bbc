"""Logging in upstream's shape: ``<RFC3339 time> [<level>] <message>``, four level names.

Operators grep multus logs by level name, so the names and their order are upstream's:
panic < error < verbose < debug (a message is written when its level is at or below the
configured one; the default, panic, writes almost nothing).

Writing happens in a listener thread, never on the event loop: a stderr pipe whose reader (the
container runtime's log shipper) stalls, or a slow disk under the log file, must not stall CNI
requests. Records are queued, and the queue is bounded (``LOG_QUEUE_CAPACITY`` records): when
the writer cannot keep up, new records are dropped and counted, never waited for (blocking
would stall the event loop on the very pipe that stalled), and the next record that fits is
preceded by one line ``dropped N log lines``. ``shutdown()`` writes out what is queued and
stops the thread, but waits for a writer stuck on its output for ``STOP_TIMEOUT`` seconds only:
the daemon's exit must stay bounded.

The log file rotates as upstream's lumberjack does (reference §8.3): by size, in the writer
thread; pruning and gzip run in a second "mill" thread so a 100 MB compression does not hold up
the writer either.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import datetime
import gzip
import logging
import logging.handlers
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO, cast

if TYPE_CHECKING:
    from multusd.config.daemon import LogOptions

LEVELS = {
    "panic": logging.CRITICAL,
    "error": logging.ERROR,
    "verbose": logging.INFO,
    "debug": logging.DEBUG,
}
_NAMES = {
    logging.CRITICAL: "panic",
    logging.ERROR: "error",
    logging.WARNING: "error",
    logging.INFO: "verbose",
    logging.DEBUG: "debug",
}


request_id: contextvars.ContextVar[str] = contextvars.ContextVar("multusd_request_id", default="")
"""The CNI request being served by the current task; set once per request by the server, so
every line logged on its behalf (commands, caches, plugins) carries it without being passed."""


class _RequestIdFilter(logging.Filter):
    """Capture the request id where the record is made (the writer thread has no context)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class MultusFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(record.created))
        # RFC 3339: "+0000" -> "Z", "+0200" -> "+02:00".
        return stamp[:-5] + "Z" if stamp.endswith("+0000") else f"{stamp[:-2]}:{stamp[-2:]}"

    def format(self, record: logging.LogRecord) -> str:
        level = _NAMES.get(record.levelno, "verbose")
        rid = getattr(record, "request_id", "")
        message = f"[{rid}] {record.getMessage()}" if rid else record.getMessage()
        text = f"{self.formatTime(record)} [{level}] {message}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def parse_level(name: str) -> int | None:
    """The Python level for an upstream level name (any case); ``None`` if unknown."""
    return LEVELS.get(name.lower()) if name else None


MEGABYTE = 1024 * 1024
"""Bytes per ``maxSize`` unit; a module constant (as lumberjack's) so tests can shrink it."""

_BACKUP_FORMAT = "%Y-%m-%dT%H-%M-%S"  # Go's "2006-01-02T15-04-05.000" without the millis
_GZ = ".gz"


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
    for suffix in (ext, ext + _GZ):
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
            name.name + _GZ
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
                kept.add(path.name.removesuffix(_GZ))  # x.log and x.log.gz count once
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
                if path.suffix != _GZ:
                    with contextlib.suppress(FileNotFoundError):
                        _gzip(path)


def _gzip(path: Path) -> None:
    """``x`` -> ``x.gz`` via a temp name (which no backup pattern matches), then drop ``x``."""
    target = path.with_name(path.name + _GZ)
    temp = path.with_name(path.name + _GZ + ".tmp")
    mode = path.stat().st_mode & 0o7777
    try:
        with open(path, "rb") as src, open(temp, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", filename="") as out:
                shutil.copyfileobj(src, out, 1024 * 1024)
            raw.flush()
            os.fchmod(raw.fileno(), mode)
            os.fsync(raw.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    path.unlink()


_Records = queue.Queue[logging.LogRecord | None]  # None: the writer's stop sentinel

LOG_QUEUE_CAPACITY = 2048
"""Records waiting for the writer at most. A prepared record costs about 1 KiB, so a stalled
output holds about 2 MiB, not the daemon's whole memory limit (50 Mi upstream)."""

STOP_TIMEOUT = 2.0
"""How long ``shutdown()`` waits for the writer to write out the queue and stop."""


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """Queue records for the writer without ever blocking: a full queue drops and counts."""

    def __init__(self, records: _Records) -> None:
        super().__init__(records)
        self._records = records
        self._lock = threading.Lock()
        self._dropped = 0
        self.dropped_total = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        if self._dropped and not self._records.full():
            self._report_drops()
        try:
            self._records.put_nowait(record)
        except queue.Full:
            with self._lock:
                self._dropped += 1
                self.dropped_total += 1

    def _report_drops(self, *, wait: float | None = None) -> None:
        """Queue the ``dropped N log lines`` summary (put back the count if it does not fit)."""
        with self._lock:
            count, self._dropped = self._dropped, 0
        if not count:
            return
        summary = logging.LogRecord(
            "multusd.logs", logging.ERROR, __file__, 0,
            f"dropped {count} log lines: the log output did not keep up", None, None,
        )  # fmt: skip
        try:
            if wait is None:
                self._records.put_nowait(summary)
            else:
                self._records.put(summary, timeout=wait)
        except queue.Full:
            with self._lock:
                self._dropped += count


class _Listener(logging.handlers.QueueListener):
    """The writer thread, with a bounded stop: a writer stuck on its output is abandoned (it
    is a daemon thread) after ``STOP_TIMEOUT``, and drains without waiting once unstuck."""

    def __init__(self, records: _Records, *outputs: logging.Handler) -> None:
        super().__init__(records, *outputs)
        self._records = records
        self._abandoned = False
        self.stopped_cleanly = True

    def start(self) -> None:
        super().start()
        if self._thread is not None:
            self._thread.name = "multusd-log-writer"

    def dequeue(self, block: bool) -> logging.LogRecord:
        # The stop sentinel (None) passes through as is: the base class tests ``is None``.
        if self._abandoned:
            return cast("logging.LogRecord", self._records.get_nowait())  # Empty ends the loop
        return cast("logging.LogRecord", self._records.get(block))

    def stop_within(self, timeout: float) -> bool:
        """Write out the queue and stop, for up to ``timeout`` s; ``True`` if the thread ended."""
        thread = self._thread
        if thread is None:
            return True
        deadline = time.monotonic() + timeout
        with contextlib.suppress(queue.Full):
            self._records.put(None, timeout=timeout)  # QueueListener's stop sentinel
        thread.join(max(0.0, deadline - time.monotonic()))
        self._thread = None
        if thread.is_alive():
            self._abandoned = True
            self.stopped_cleanly = False
            return False
        return True


class _Writer:
    """The one listener thread that writes log records (replaced on reconfiguration)."""

    listener: _Listener | None = None
    handler: _DroppingQueueHandler | None = None


_writer = _Writer()


def shutdown(timeout: float | None = None) -> None:
    """Write out every queued record, stop the writer thread, close the outputs (idempotent).

    Bounded by ``timeout`` (``STOP_TIMEOUT``): a writer stuck on its output is left behind,
    and its outputs are not closed under it.
    """
    limit = STOP_TIMEOUT if timeout is None else timeout
    listener, _writer.listener = _writer.listener, None
    handler, _writer.handler = _writer.handler, None
    if listener is None:
        return
    deadline = time.monotonic() + limit
    if handler is not None:
        handler._report_drops(wait=limit)  # the last summary, before the writer stops
    if listener.stop_within(max(0.0, deadline - time.monotonic())):
        for output in listener.handlers:
            output.close()


def output_handlers() -> tuple[logging.Handler, ...]:
    """Where records end up (the listener's handlers); for tests and diagnostics."""
    return tuple(_writer.listener.handlers) if _writer.listener is not None else ()


def dropped_lines() -> int:
    """Log records dropped so far because the output did not keep up (for diagnostics)."""
    return _writer.handler.dropped_total if _writer.handler is not None else 0


def configure(
    *,
    level: str = "",
    to_stderr: bool = False,
    log_file: str = "",
    stream: TextIO | None = None,
    log_options: LogOptions | None = None,
) -> None:
    """(Re)configure the ``multusd`` logger from daemon-config values.

    ``log_options`` applies whenever ``log_file`` is set. (Upstream's per-request path applies
    ``logOptions`` before ``logFile``, so there they only count if a file was already
    configured; the daemon passes both at once, so that ordering quirk has no equivalent.)
    """
    logger = logging.getLogger("multusd")
    shutdown()
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    logger.propagate = False
    parsed = parse_level(level)
    if level and parsed is None:
        print(f"multus logging: cannot set logging level to {level}", file=sys.stderr)
    logger.setLevel(parsed if parsed is not None else logging.CRITICAL)
    formatter = MultusFormatter()
    outputs: list[logging.Handler] = []
    if to_stderr:
        outputs.append(logging.StreamHandler(stream or sys.stderr))
    if log_file:
        outputs.append(RotatingFile(log_file, Rotation.from_options(log_options)))
    if not outputs:
        logger.addHandler(logging.NullHandler())
        return
    for handler in outputs:
        handler.setFormatter(formatter)
    records: _Records = queue.Queue(LOG_QUEUE_CAPACITY)
    queue_handler = _DroppingQueueHandler(records)
    queue_handler.addFilter(_RequestIdFilter())
    logger.addHandler(queue_handler)
    _writer.handler = queue_handler
    _writer.listener = _Listener(records, *outputs)
    _writer.listener.start()


atexit.register(shutdown)
