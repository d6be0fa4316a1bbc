"""Logging in upstream's shape: ``<RFC3339 time> [<level>] <message>``, four level names.

Operators grep multus logs by level name, so the names and their order are upstream's:
panic < error < verbose < debug (a message is written when its level is at or below the
configured one; the default, panic, writes almost nothing).
"""

from __future__ import annotations

import logging
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


def configure(
    *, level: str = "", to_stderr: bool = False, log_file: str = "", stream: TextIO | None = None
) -> None:
    """(Re)configure the ``multusd`` logger from daemon-config values."""
    logger = logging.getLogger("multusd")
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    logger.propagate = False
    parsed = parse_level(level)
    if level and parsed is None:
        print(f"multus logging: cannot set logging level to {level}", file=sys.stderr)
    logger.setLevel(parsed if parsed is not None else logging.CRITICAL)
    formatter = MultusFormatter()
    if to_stderr:
        stderr_handler = logging.StreamHandler(stream or sys.stderr)
        stderr_handler.setFormatter(formatter)
        logger.addHandler(stderr_handler)
    if log_file:
        file_handler = logging.FileHandler(log_file, delay=True)
        file_handler.setFormatter(formatter)
        logger.addHandler(file_handler)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
