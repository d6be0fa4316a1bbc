"""Logging in upstream's shape, written by a thread of its own: the public entry.

:func:`configure` wires the ``multusd`` logger from the daemon config, :func:`shutdown` writes
out what is queued and stops the writer (bounded). The pieces behind them:

* :mod:`multusd.logs.format`: ``<RFC3339 time> [<level>] <message>``, upstream's four level
  names, and the request id every line of a CNI request carries;
* :mod:`multusd.logs.writer`: the bounded queue (drop and count, never block) and the one
  thread that writes, so a stalled output never stalls the event loop;
* :mod:`multusd.logs.rotation`: the log file with lumberjack's rotation, and its mill thread;
* :mod:`multusd.logs.compress`: the gzip of a rotated file.
"""

from __future__ import annotations

import atexit
import logging
import queue
import sys
import time
from typing import TYPE_CHECKING, TextIO

from multusd.logs.format import MultusFormatter, RequestIdFilter, parse_level
from multusd.logs.rotation import RotatingFile, Rotation
from multusd.logs.writer import (
    LOG_QUEUE_CAPACITY,
    STOP_TIMEOUT,
    DroppingQueueHandler,
    Records,
    WriterThread,
)

if TYPE_CHECKING:
    from multusd.config.daemon import LogOptions


class _Writer:
    """The one listener thread that writes log records (replaced on reconfiguration)."""

    listener: WriterThread | None = None
    handler: DroppingQueueHandler | None = None


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
        handler.report_drops(wait=limit)  # the last summary, before the writer stops
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
    records: Records = queue.Queue(LOG_QUEUE_CAPACITY)
    queue_handler = DroppingQueueHandler(records)
    queue_handler.addFilter(RequestIdFilter())
    logger.addHandler(queue_handler)
    _writer.handler = queue_handler
    _writer.listener = WriterThread(records, *outputs)
    _writer.listener.start()


atexit.register(shutdown)
