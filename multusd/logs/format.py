"""The line format and the level names: ``<RFC3339 time> [<level>] <message>``, upstream's.

Operators grep multus logs by level name, so the names and their order are upstream's:
panic < error < verbose < debug (a message is written when its level is at or below the
configured one; the default, panic, writes almost nothing).

Every line logged on behalf of a CNI request carries that request's id (:data:`request_id`),
captured where the record is made, since the writer thread that formats it has no context.
"""

from __future__ import annotations

import contextvars
import logging
import time

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


class RequestIdFilter(logging.Filter):
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
