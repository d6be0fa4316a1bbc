"""The one token bucket every API request passes through (client-go's QPS/Burst, 50/50).

Semantics are golang.org/x/time/rate's: ``burst`` tokens at most, refilled at ``qps`` per
second, one token per request. Two things client-go gets for free and asyncio does not:

* **Strict FIFO.** Once anyone waits, newcomers queue behind them even if a token is free, so a
  storm of new requests cannot starve an old one (throttled-py's barging, reference §5).
* **Cancellation safety.** A cancelled waiter leaves the queue without taking a token; one that
  was granted a token but cancelled before it ran gives the token back.

No task and no polling: waiters park on futures and a single ``call_later`` timer, armed only
while someone waits, fires when the head of the queue can be served.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BucketStatistics", "TokenBucket"]

# Float slack: after sleeping exactly (1 - tokens) / qps the refill may land at 0.9999999.
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class BucketStatistics:
    qps: float
    burst: int
    tokens: float  # available now (may be fractional)
    waiting: int  # callers queued in acquire()
    acquired: int  # tokens handed out so far
    total_wait: float  # seconds, summed over every acquire()
    max_wait: float


class TokenBucket:
    """``burst`` tokens, refilled at ``qps``/s; ``acquire()`` waits in strict FIFO order.

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
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._acquired = 0
        self._total_wait = 0.0
        self._max_wait = 0.0

    # --- public ------------------------------------------------------------------------------

    async def acquire(self) -> float:
        """Take one token, waiting behind earlier callers; returns the seconds waited."""
        if self.acquire_nowait():
            return 0.0
        loop = asyncio.get_running_loop()
        started = self._clock()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        self._dispatch()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Granted, but cancelled before running: the token goes back.
                self._tokens = min(float(self._burst), self._tokens + 1.0)
            else:
                self._remove(waiter)
            self._dispatch()
            raise
        waited = max(0.0, self._clock() - started)
        self._acquired += 1
        self._total_wait += waited
        self._max_wait = max(self._max_wait, waited)
        return waited

    def acquire_nowait(self) -> bool:
        """Take a token if one is free and nobody is queued; never waits."""
        self._refill()
        if any(not w.done() for w in self._waiters) or self._tokens < 1.0 - _EPSILON:
            return False
        self._tokens = max(0.0, self._tokens - 1.0)
        self._acquired += 1
        return True

    def statistics(self) -> BucketStatistics:
        self._refill()
        return BucketStatistics(
            qps=self._qps,
            burst=self._burst,
            tokens=self._tokens,
            waiting=self._waiting(),
            acquired=self._acquired,
            total_wait=self._total_wait,
            max_wait=self._max_wait,
        )

    # --- internals ---------------------------------------------------------------------------

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(float(self._burst), self._tokens + elapsed * self._qps)
            self._last = now

    def _waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def _remove(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)

    def _dispatch(self) -> None:
        """Serve the head of the queue while tokens last, then arm the timer for the next."""
        self._refill()
        while self._waiters:
            head = self._waiters[0]
            if head.done():  # cancelled meanwhile
                self._waiters.popleft()
                continue
            if self._tokens < 1.0 - _EPSILON:
                break
            self._waiters.popleft()
            self._tokens = max(0.0, self._tokens - 1.0)
            head.set_result(None)
        if not self._waiters:
            self._cancel_timer()
            return
        if self._timer is None:
            delay = max(0.0, (1.0 - self._tokens) / self._qps)
            loop = self._waiters[0].get_loop()
            self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
