"""The one token bucket every API request passes through (client-go's QPS/Burst, 50/50).

Semantics are golang.org/x/time/rate's: ``burst`` tokens at most, refilled at ``qps`` per
second, one token per request. Three things client-go does not need or gets for free:

* **Two classes.** ``Priority.REQUEST`` (the CNI request path: the network-status PATCH, the
  fallback GETs; and the caches' lists and watches) is always served before
  ``Priority.BACKGROUND`` (Kubernetes Events): a queued background request takes a token only
  when no request-class caller waits. Events are advisory and their queue is bounded and
  drops, so starving them under a sustained storm is the intended outcome; an ADD waiting
  behind a backlog of events is not.
* **Strict FIFO within a class.** Once anyone of a class waits, newcomers of that class (and
  of any lower one) queue behind them even if a token is free, so a storm of new requests
  cannot starve an old one (no barging).
* **Cancellation safety.** A cancelled waiter leaves its queue without taking a token; one that
  was granted a token but cancelled before it ran gives the token back to the next in line.

No task and no polling: waiters park on futures and a single ``call_later`` timer, armed only
while someone waits, fires when the head of the queue can be served.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BucketStatistics", "Priority", "TokenBucket"]

# Float slack: after sleeping exactly (1 - tokens) / qps the refill may land at 0.9999999.
_EPSILON = 1e-9


class Priority(enum.IntEnum):
    """Who is served first: lower values before higher ones."""

    REQUEST = 0
    """The CNI request path and the caches (the default of every request)."""
    BACKGROUND = 1
    """Work nobody waits for: Kubernetes Events."""


@dataclass(frozen=True, slots=True)
class BucketStatistics:
    qps: float
    burst: int
    tokens: float  # available now (may be fractional)
    waiting: int  # callers queued in acquire(), both classes
    acquired: int  # tokens handed out so far
    total_wait: float  # seconds, summed over every acquire()
    max_wait: float
    waiting_background: int = 0  # of ``waiting``, those of ``Priority.BACKGROUND``


class TokenBucket:
    """``burst`` tokens, refilled at ``qps``/s; ``acquire()`` waits in strict FIFO order within
    its :class:`Priority`, request class first.

    ``clock`` returns seconds; it defaults to ``time.monotonic`` (the clock asyncio's loop
    uses), and tests inject the loop's own (virtual) clock.
    """

    def __init__(
        self,
        qps: float = 50.0,
        burst: int = 50,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not (math.isfinite(qps) and qps > 0):
            raise ValueError(f"qps must be a positive number, not {qps!r}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, not {burst!r}")
        self._qps = float(qps)
        self._burst = int(burst)
        self._clock = clock or time.monotonic
        self._tokens = float(burst)
        self._last = self._clock()
        # One FIFO per class, indexed by Priority: the first non-empty one is served first.
        self._queues: tuple[collections.deque[asyncio.Future[None]], ...] = tuple(
            collections.deque() for _ in Priority
        )
        self._timer: asyncio.TimerHandle | None = None
        self._acquired = 0
        self._total_wait = 0.0
        self._max_wait = 0.0

    # --- public ------------------------------------------------------------------------------

    async def acquire(self, priority: Priority = Priority.REQUEST) -> float:
        """Take one token, waiting behind earlier callers of this class and every caller of a
        higher one; returns the seconds waited."""
        if self.acquire_nowait(priority):
            return 0.0
        loop = asyncio.get_running_loop()
        started = self._clock()
        waiter: asyncio.Future[None] = loop.create_future()
        queue = self._queues[priority]
        queue.append(waiter)
        self._dispatch()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Granted, but cancelled before running: the token goes back.
                self._tokens = min(float(self._burst), self._tokens + 1.0)
            else:
                with contextlib.suppress(ValueError):
                    queue.remove(waiter)
            self._dispatch()
            raise
        waited = max(0.0, self._clock() - started)
        self._acquired += 1
        self._total_wait += waited
        self._max_wait = max(self._max_wait, waited)
        return waited

    def acquire_nowait(self, priority: Priority = Priority.REQUEST) -> bool:
        """Take a token if one is free and nobody of this class or a higher one is queued;
        never waits."""
        self._refill()
        if self._tokens < 1.0 - _EPSILON:
            return False
        if any(_pending(q) for q in self._queues[: priority + 1]):
            return False
        self._tokens = max(0.0, self._tokens - 1.0)
        self._acquired += 1
        return True

    def statistics(self) -> BucketStatistics:
        self._refill()
        background = _pending(self._queues[Priority.BACKGROUND])
        return BucketStatistics(
            qps=self._qps,
            burst=self._burst,
            tokens=self._tokens,
            waiting=sum(_pending(q) for q in self._queues),
            acquired=self._acquired,
            total_wait=self._total_wait,
            max_wait=self._max_wait,
            waiting_background=background,
        )

    # --- internals ---------------------------------------------------------------------------

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(float(self._burst), self._tokens + elapsed * self._qps)
            self._last = now

    def _head(self) -> asyncio.Future[None] | None:
        """The next waiter to serve (dropping the cancelled ones met on the way)."""
        for queue in self._queues:
            while queue:
                if not queue[0].done():
                    return queue[0]
                queue.popleft()
        return None

    def _dispatch(self) -> None:
        """Serve the head of the queues while tokens last, then arm the timer for the next."""
        self._refill()
        while (head := self._head()) is not None:
            if self._tokens < 1.0 - _EPSILON:
                break
            for queue in self._queues:
                if queue and queue[0] is head:
                    queue.popleft()
                    break
            self._tokens = max(0.0, self._tokens - 1.0)
            head.set_result(None)
        if head is None:
            self._cancel_timer()
            return
        if self._timer is None:
            delay = max(0.0, (1.0 - self._tokens) / self._qps)
            self._timer = head.get_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _pending(queue: collections.deque[asyncio.Future[None]]) -> int:
    return sum(1 for w in queue if not w.done())
