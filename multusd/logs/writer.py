"""The bounded queue between the code that logs and the one thread that writes.

Writing happens in a listener thread, never on the event loop: a stderr pipe whose reader (the
container runtime's log shipper) stalls, or a slow disk under the log file, must not stall CNI
requests. Records are queued, and the queue is bounded (``LOG_QUEUE_CAPACITY`` records): when
the writer cannot keep up, new records are dropped and counted, never waited for (blocking
would stall the event loop on the very pipe that stalled), and the next record that fits is
preceded by one line ``dropped N log lines``. Stopping writes out what is queued, but waits for
a writer stuck on its output for ``STOP_TIMEOUT`` seconds only: the daemon's exit must stay
bounded.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import queue
import threading
import time
from typing import cast

Records = queue.Queue[logging.LogRecord | None]  # None: the writer's stop sentinel

LOG_QUEUE_CAPACITY = 2048
"""Records waiting for the writer at most. A prepared record costs about 1 KiB, so a stalled
output holds about 2 MiB, not the daemon's whole memory limit (50 Mi upstream)."""

STOP_TIMEOUT = 2.0
"""How long ``shutdown()`` waits for the writer to write out the queue and stop."""


class DroppingQueueHandler(logging.handlers.QueueHandler):
    """Queue records for the writer without ever blocking: a full queue drops and counts."""

    def __init__(self, records: Records) -> None:
        super().__init__(records)
        self._records = records
        self._lock = threading.Lock()
        self._dropped = 0
        self.dropped_total = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        if self._dropped and not self._records.full():
            self.report_drops()
        try:
            self._records.put_nowait(record)
        except queue.Full:
            with self._lock:
                self._dropped += 1
                self.dropped_total += 1

    def report_drops(self, *, wait: float | None = None) -> None:
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


class WriterThread(logging.handlers.QueueListener):
    """The writer thread, with a bounded stop: a writer stuck on its output is abandoned (it
    is a daemon thread) after ``STOP_TIMEOUT``, and drains without waiting once unstuck."""

    def __init__(self, records: Records, *outputs: logging.Handler) -> None:
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
