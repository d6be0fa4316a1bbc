"""The token bucket on a virtual clock: exact grant times, FIFO, the window bound, cancellation.

Each test runs its own event loop whose clock only moves when the loop would otherwise sleep
(the selector advances it by the timeout instead of blocking), so timing is exact and the tests
take milliseconds. The bucket is given the loop's clock, as the contract allows.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multusd.k8s.ratelimit import TokenBucket

T = TypeVar("T")


class _VirtualSelector(selectors.BaseSelector):
    """A selector that never blocks: a wait for ``timeout`` advances virtual time instead."""

    def __init__(self) -> None:
        self._real = selectors.DefaultSelector()
        self.now = 0.0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if not ready:
            if timeout is None:
                raise RuntimeError("virtual loop would block forever (deadlock in the test)")
            self.now += timeout
        return ready

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


def run_virtual(main: Callable[[asyncio.AbstractEventLoop], Awaitable[T]]) -> T:
    selector = _VirtualSelector()
    loop = asyncio.SelectorEventLoop(selector)
    loop.time = lambda: selector.now  # type: ignore[method-assign]
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


def model_grants(calls: list[float], qps: float, burst: int) -> list[float]:
    """golang.org/x/time/rate's reservation model, FIFO: the earliest legal grant times."""
    tokens, last, grants = float(burst), 0.0, []
    for call in calls:  # in call order, so non-decreasing
        tokens = min(float(burst), tokens + (call - last) * qps) - 1.0
        last = call
        grants.append(call if tokens >= 0 else call - tokens / qps)
    return grants


async def _run_arrivals(
    loop: asyncio.AbstractEventLoop, arrivals: list[float], qps: float, burst: int
) -> tuple[list[int], list[int], list[float], list[float]]:
    bucket = TokenBucket(qps, burst, clock=loop.time)
    called: list[int] = []
    granted: list[int] = []
    call_times = [0.0] * len(arrivals)
    grant_times = [0.0] * len(arrivals)

    async def one(i: int, at: float) -> None:
        await asyncio.sleep(at)
        call_times[i] = loop.time()
        called.append(i)
        waited = await bucket.acquire()
        grant_times[i] = loop.time()
        assert waited == pytest.approx(grant_times[i] - call_times[i], abs=1e-9)
        granted.append(i)

    await asyncio.gather(*(one(i, at) for i, at in enumerate(arrivals)))
    stats = bucket.statistics()
    assert stats.acquired == len(arrivals)
    assert stats.waiting == 0
    return called, granted, call_times, grant_times


def test_burst_then_qps() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> list[float]:
        _, _, _, grants = await _run_arrivals(loop, [0.0] * 12, qps=4, burst=4)
        return grants

    grants = run_virtual(main)
    assert grants[:4] == [0.0] * 4
    assert grants[4:] == pytest.approx([0.25 * k for k in range(1, 9)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arrivals=st.lists(st.floats(0, 3, allow_nan=False).map(lambda x: round(x, 3)), max_size=60),
    qps=st.sampled_from([1.0, 5.0, 20.0, 50.0]),
    burst=st.integers(1, 10),
)
def test_fifo_window_bound_and_exact_times(arrivals: list[float], qps: float, burst: int) -> None:
    called, granted, call_times, grant_times = run_virtual(
        lambda loop: _run_arrivals(loop, arrivals, qps, burst)
    )
    # Strict FIFO: tokens are handed out in the order acquire() was called.
    assert granted == called
    # Never more than burst + qps*t in any window [a, b] of grant times.
    times = sorted(grant_times)
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            assert j - i + 1 <= burst + qps * (times[j] - start) + 1e-6
    # Work-conserving: nobody waits longer than the reference model says.
    expected = model_grants([call_times[i] for i in called], qps, burst)
    assert [grant_times[i] for i in called] == pytest.approx(expected, abs=1e-6)


def test_cancelled_waiter_takes_no_token_and_does_not_block_queue() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        bucket = TokenBucket(1.0, 1, clock=loop.time)
        assert await bucket.acquire() == 0.0
        b = asyncio.create_task(bucket.acquire())
        c = asyncio.create_task(bucket.acquire())
        await asyncio.sleep(0.5)
        assert bucket.statistics().waiting == 2
        b.cancel()
        with pytest.raises(asyncio.CancelledError):
            await b
        assert bucket.statistics().waiting == 1
        assert await c == pytest.approx(1.0)  # the token b would have had at t=1
        assert loop.time() == pytest.approx(1.0)
        stats = bucket.statistics()
        assert (stats.acquired, stats.waiting) == (2, 0)

    run_virtual(main)


def test_waiter_cancelled_after_grant_gives_the_token_back() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        bucket = TokenBucket(1.0, 1, clock=loop.time)
        await bucket.acquire()
        b = asyncio.create_task(bucket.acquire())
        c = asyncio.create_task(bucket.acquire())
        await asyncio.sleep(0)
        # Runs in the same loop iteration as the bucket's timer (t=1.0), after it resolved b's
        # future but before b's task resumes: b is granted, then cancelled.
        loop.call_at(1.0 + 1e-12, b.cancel)
        with pytest.raises(asyncio.CancelledError):
            await b
        assert await c == pytest.approx(1.0)  # the refunded token, not one at t=2
        assert bucket.statistics().acquired == 2

    run_virtual(main)


def test_every_waiter_cancelled_leaves_a_full_bucket() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        bucket = TokenBucket(10.0, 3, clock=loop.time)
        for _ in range(3):
            assert bucket.acquire_nowait()
        tasks = [asyncio.create_task(bucket.acquire()) for _ in range(50)]
        await asyncio.sleep(0.01)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(1.0)
        stats = bucket.statistics()
        assert stats.waiting == 0
        assert stats.tokens == pytest.approx(3.0)
        assert stats.acquired == 3 + sum(1 for t in tasks if not t.cancelled())

    run_virtual(main)


def test_acquire_nowait_and_statistics() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        bucket = TokenBucket(2.0, 2, clock=loop.time)
        assert bucket.acquire_nowait()
        assert bucket.acquire_nowait()
        assert not bucket.acquire_nowait()
        waiter = asyncio.create_task(bucket.acquire())
        await asyncio.sleep(0.5)  # a token is free now, but a waiter is first in line
        assert await waiter == pytest.approx(0.5)
        await asyncio.sleep(0.25)
        assert not bucket.acquire_nowait()  # half a token
        await asyncio.sleep(0.25)
        assert bucket.acquire_nowait()
        assert await bucket.acquire() == pytest.approx(0.5)
        stats = bucket.statistics()
        assert (stats.qps, stats.burst, stats.acquired, stats.waiting) == (2.0, 2, 5, 0)
        assert stats.total_wait == pytest.approx(1.0)
        assert stats.max_wait == pytest.approx(0.5)
        assert stats.tokens == pytest.approx(0.0)

    run_virtual(main)


def test_timer_is_only_armed_while_someone_waits() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        bucket = TokenBucket(1.0, 1, clock=loop.time)
        await bucket.acquire()
        waiter = asyncio.create_task(bucket.acquire())
        await asyncio.sleep(0)

        def armed() -> bool:
            return bucket._timer is not None

        assert armed()
        await waiter
        assert not armed()
        # One timer for many waiters, not one sleeper each.
        tasks = [asyncio.create_task(bucket.acquire()) for _ in range(5)]
        await asyncio.sleep(0)
        timers = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert len(timers) == 1
        await asyncio.gather(*tasks)

    run_virtual(main)


def test_defaults_are_upstreams() -> None:
    stats = TokenBucket().statistics()
    assert (stats.qps, stats.burst, stats.tokens) == (50.0, 50, 50.0)


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (float("inf"), 1), (1, 0)])
def test_rejects_nonsense(qps: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(qps, burst)


async def test_real_loop_smoke() -> None:
    """On the real loop and clock: a short burst beyond capacity is served, in order."""
    bucket = TokenBucket(200.0, 2)
    order: list[int] = []

    async def one(i: int) -> None:
        await bucket.acquire()
        order.append(i)

    await asyncio.gather(*(one(i) for i in range(6)))
    assert order == list(range(6))
    assert bucket.statistics().max_wait > 0


async def test_no_barging_when_tokens_accrue_before_the_timer_fires() -> None:
    """A late timer (a busy loop) leaves tokens in the bucket while someone waits: newcomers
    must still queue behind the waiter rather than take them."""
    now = [0.0]
    bucket = TokenBucket(1.0, 3, clock=lambda: now[0])
    for _ in range(3):
        assert bucket.acquire_nowait()
    order: list[str] = []

    async def take(name: str) -> None:
        await bucket.acquire()
        order.append(name)

    first = asyncio.create_task(take("first"))
    await asyncio.sleep(0)
    now[0] += 5.0  # the bucket refilled, but its timer (1 s of loop time) has not fired
    assert not bucket.acquire_nowait()
    await take("second")
    # The waiter was served from the refilled bucket too, not left for the timer (a newcomer
    # that barged would have taken a token while "first" kept waiting).
    for _ in range(3):
        await asyncio.sleep(0)
    assert first.done()
    await first
    assert sorted(order) == ["first", "second"]
    assert bucket.statistics().acquired == 5
