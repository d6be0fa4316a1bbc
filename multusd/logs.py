"""Logging in upstream's shape: ``<RFC3339 time> [<level>] <message>``, four level names.

Operators grep multus logs by level name, so the names and their order are upstream's:
panic < error < verbose < debug (a message is written when its level is at or below the
configured one; the default, panic, writes almost nothing).

Writing happens in a listener thread, never on the event loop: a stderr pipe whose reader (the
container runtime's log shipper) stalls, or a slow disk under the log file, must not stall CNI
requests. Records are queued; ``shutdown()`` drains the queue and stops the thread.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue
import sys
import time
from typing import TextIO

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


class MultusFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(record.created))
        # RFC 3339: "+0000" -> "Z", "+0200" -> "+02:00".
        return stamp[:-5] + "Z" if stamp.endswith("+0000") else f"{stamp[:-2]}:{stamp[-2:]}"

    def format(self, record: logging.LogRecord) -> str:
        level = _NAMES.get(record.levelno, "verbose")
        text = f"{self.formatTime(record)} [{level}] {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def parse_level(name: str) -> int | None:
    """The Python level for an upstream level name (any case); ``None`` if unknown."""
    return LEVELS.get(name.lower()) if name else None


class _Writer:
    """The one listener thread that writes log records (replaced on reconfiguration)."""

    listener: logging.handlers.QueueListener | None = None


_writer = _Writer()


def shutdown() -> None:
    """Write out every queued record, stop the writer thread, close the outputs (idempotent)."""
    listener, _writer.listener = _writer.listener, None
    if listener is not None:
        listener.stop()
        for handler in listener.handlers:
            handler.close()


def output_handlers() -> tuple[logging.Handler, ...]:
    """Where records end up (the listener's handlers); for tests and diagnostics."""
    return tuple(_writer.listener.handlers) if _writer.listener is not None else ()


def configure(
    *, level: str = "", to_stderr: bool = False, log_file: str = "", stream: TextIO | None = None
) -> None:
    """(Re)configure the ``multusd`` logger from daemon-config values."""
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
        outputs.append(logging.FileHandler(log_file, delay=True))
    if not outputs:
        logger.addHandler(logging.NullHandler())
        return
    for handler in outputs:
        handler.setFormatter(formatter)
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    logger.addHandler(logging.handlers.QueueHandler(records))
    _writer.listener = logging.handlers.QueueListener(records, *outputs)
    _writer.listener.start()


atexit.register(shutdown)
