"""The loop guard: a test fails when a callback holds its event loop too long.

The design promises that nothing blocks the daemon's loop (docs/architecture.md): plugins are
asyncio subprocesses, files are read and written in worker threads, netlink runs in a thread
of the pod's namespace, log lines are written by a thread of their own. A synchronous call that
breaks that promise passes every functional test and only shows as every other request on the
node waiting. So ``tests/conftest.py`` runs each in-process test's loop in asyncio's debug
mode, which times every callback (each step of a task is one) and logs the ones that took
longer than ``loop.slow_callback_duration``; the guard collects those reports for its own loop
only (other loops, in threads or made by a test, are theirs) and fails the test with them.

Why 1 s (docs/development.md, "The loop guard"): on a 2-core machine shared by several test
sessions, callbacks that do nothing slow were seen to take up to 0.28 s (scheduling, a
garbage collection); a real block (a synchronous read of a pipe nobody writes, a
``subprocess.run``, a ``time.sleep``) shows as seconds. ``MULTUSD_SLOW_CALLBACK=0.05`` lowers
the threshold to hunt for the smaller ones on a quiet machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator

SLOW_CALLBACK_ENV = "MULTUSD_SLOW_CALLBACK"
SLOW_CALLBACK_SECONDS = 1.0
"""The default threshold, in seconds; ``MULTUSD_SLOW_CALLBACK`` overrides it."""
_REPORT = "Executing %s took %.3f seconds"  # asyncio.base_events.BaseEventLoop._run_once


def slow_callback_seconds() -> float:
    return float(os.environ.get(SLOW_CALLBACK_ENV, SLOW_CALLBACK_SECONDS))


class SlowCallbacks(logging.Handler):
    """asyncio's reports of slow callbacks on ``loop``, as text (``Executing <Task ...> took
    1.234 seconds``). asyncio logs them from the loop's own thread right after the callback,
    while the loop is running, which is how a report is told apart from another loop's."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.WARNING)
        self.loop = loop
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == _REPORT and asyncio._get_running_loop() is self.loop:
            self.found.append(record.getMessage())


@contextlib.contextmanager
def watching(loop: asyncio.AbstractEventLoop, threshold: float) -> Iterator[SlowCallbacks]:
    """Debug mode and ``threshold`` on ``loop`` while the block runs; yields the collector."""
    debug, duration = loop.get_debug(), loop.slow_callback_duration
    loop.set_debug(True)
    loop.slow_callback_duration = threshold
    slow = SlowCallbacks(loop)
    logger = logging.getLogger("asyncio")
    logger.addHandler(slow)
    try:
        yield slow
    finally:
        logger.removeHandler(slow)
        loop.set_debug(debug)
        loop.slow_callback_duration = duration
