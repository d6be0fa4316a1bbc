"""Cache-file work that may overlap the rest of a request, and must be done before its answer.

libcni writes an attachment's result cache at the end of ``AddNetworkList`` and removes it at
the end of ``DelNetworkList``; each is a file operation in a worker thread (a write with its
fsync costs ~2.5 ms here). Nothing of the request's own needs that file before the answer,
except a rollback (the DEL reads its ``prevResult``), so a command may let the work run beside
what follows: the next delegate, the network-status PATCH. Inside :meth:`Pending.collecting`
the cache layer starts the operation as a task of the request's instead of awaiting it
(:func:`run`); the command then awaits :meth:`Pending.settle` before a rollback and before it
answers, so the runtime never hears "done" before the file is. Outside that block, the
operation is awaited where it is called, as libcni does. Measured in
docs/performance.md, "Where one request's wall time goes".
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Coroutine, Iterator
from typing import Any

log = logging.getLogger(__name__)

_collector: contextvars.ContextVar[Pending | None] = contextvars.ContextVar(
    "multusd_pending_cache_work", default=None
)


class Pending:
    """One request's cache operations still running, each with the label of its caller."""

    def __init__(self) -> None:
        self._tasks: list[tuple[str, asyncio.Task[Any]]] = []
        self._label = ""

    @contextlib.contextmanager
    def collecting(self, label: str) -> Iterator[None]:
        """Cache operations started in this block (its tasks included) are this one's, under
        ``label`` (the delegate's network name, for the error of a write that failed)."""
        self._label = label
        token = _collector.set(self)
        try:
            yield
        finally:
            _collector.reset(token)

    def start(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(work)
        task.add_done_callback(_retrieved)
        self._tasks.append((self._label, task))

    async def settle(self) -> list[tuple[str, BaseException]]:
        """Wait for every operation started so far; their failures, with their labels.

        If the wait is cancelled the operations are not: a worker thread cannot be stopped,
        and a file written after the request's end is what an awaited write would have left.
        """
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return []
        await asyncio.wait([task for _, task in tasks])
        return [(label, exc) for label, task in tasks if (exc := task.exception()) is not None]


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Its failure is :meth:`Pending.settle`'s to report; one that ends after a cancelled
    settle is logged here, instead of as "Task exception was never retrieved"."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.debug("cache operation failed: %s", exc)


async def run(work: Coroutine[Any, Any, None]) -> None:
    """Await ``work`` here, or hand it to the collecting :class:`Pending` to await later."""
    pending = _collector.get()
    if pending is None:
        await work
    else:
        pending.start(work)
