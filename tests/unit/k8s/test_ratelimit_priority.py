"""The token bucket's two classes on a virtual clock: the CNI request path before background
work, FIFO within each class, the window bound across both, and cancellation in either."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multusd.k8s.ratelimit import Priority, TokenBucket
from tests.unit.k8s.test_ratelimit import run_virtual

REQUEST, BACKGROUND = Priority.REQUEST, Priority.BACKGROUND


def test_request_class_is_served_before_earlier_background_waiters() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> list[tuple[str, float]]:
        bucket = TokenBucket(1.0, 1, clock=loop.time)
        assert bucket.acquire_nowait()
        order: list[tuple[str, float]] = []

        async def take(name: str, priority: Priority, at: float) -> None:
            await asyncio.sleep(at)
            await bucket.acquire(priority)
            order.append((name, loop.time()))

        await asyncio.gather(
            take("b1", BACKGROUND, 0.0),
            take("b2", BACKGROUND, 0.0),
            take("b3", BACKGROUND, 0.0),
            take("r1", REQUEST, 0.1),
            take("r2", REQUEST, 0.2),
        )
        return order

    order = run_virtual(main)
    assert [name for name, _ in order] == ["r1", "r2", "b1", "b2", "b3"]
    assert [at for _, at in order] == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0])


def test_background_waits_only_for_what_the_request_path_leaves() -> None:
    """A free token goes to a background waiter at once when no request waits for it."""

    async def main(loop: asyncio.AbstractEventLoop) -> float:
        bucket = TokenBucket(10.0, 2, clock=loop.time)
        return await bucket.acquire(BACKGROUND)

    assert run_virtual(main) == 0.0


def test_acquire_nowait_respects_the_classes() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        bucket = TokenBucket(1.0, 2, clock=loop.time)
        assert bucket.acquire_nowait()
        assert bucket.acquire_nowait()
        background = asyncio.create_task(bucket.acquire(BACKGROUND))
        await asyncio.sleep(0)
        assert bucket.statistics().waiting_background == 1
        # No token now: nobody gets one without waiting, whatever the class.
        assert not bucket.acquire_nowait(REQUEST)
        assert not bucket.acquire_nowait(BACKGROUND)
        request = asyncio.create_task(bucket.acquire(REQUEST))
        await asyncio.sleep(0)
        stats = bucket.statistics()
        assert (stats.waiting, stats.waiting_background) == (2, 1)
        assert await request == pytest.approx(1.0)  # the request was queued later, served first
        assert await background == pytest.approx(2.0)

    run_virtual(main)


def test_cancelled_request_waiter_does_not_hold_up_background() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        bucket = TokenBucket(1.0, 1, clock=loop.time)
        assert bucket.acquire_nowait()
        background = asyncio.create_task(bucket.acquire(BACKGROUND))
        request = asyncio.create_task(bucket.acquire(REQUEST))
        await asyncio.sleep(0.5)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        assert await background == pytest.approx(1.0)
        assert bucket.statistics().acquired == 2

    run_virtual(main)


def test_granted_then_cancelled_gives_the_token_to_the_next_in_line() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        bucket = TokenBucket(1.0, 1, clock=loop.time)
        assert bucket.acquire_nowait()
        first = asyncio.create_task(bucket.acquire(REQUEST))
        background = asyncio.create_task(bucket.acquire(BACKGROUND))
        await asyncio.sleep(0)
        loop.call_at(1.0 + 1e-12, first.cancel)  # granted at t=1, cancelled before it ran
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await background == pytest.approx(1.0)  # the refunded token
        stats = bucket.statistics()
        assert (stats.acquired, stats.waiting, stats.waiting_background) == (2, 0, 0)

    run_virtual(main)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    calls=st.lists(
        st.tuples(st.floats(0, 3, allow_nan=False).map(lambda x: round(x, 3)), st.booleans()),
        max_size=60,
    ),
    qps=st.sampled_from([1.0, 5.0, 20.0, 50.0]),
    burst=st.integers(1, 10),
)
def test_two_classes_keep_the_window_bound_and_fifo_within_each(
    calls: list[tuple[float, bool]], qps: float, burst: int
) -> None:
    async def main(
        loop: asyncio.AbstractEventLoop,
    ) -> tuple[dict[Priority, list[int]], dict[Priority, list[int]], list[float]]:
        bucket = TokenBucket(qps, burst, clock=loop.time)
        called: dict[Priority, list[int]] = {REQUEST: [], BACKGROUND: []}
        granted: dict[Priority, list[int]] = {REQUEST: [], BACKGROUND: []}
        grant_times: list[float] = []

        async def one(i: int, at: float, background: bool) -> None:
            priority = BACKGROUND if background else REQUEST
            await asyncio.sleep(at)
            called[priority].append(i)
            await bucket.acquire(priority)
            granted[priority].append(i)
            grant_times.append(loop.time())

        await asyncio.gather(*(one(i, at, bg) for i, (at, bg) in enumerate(calls)))
        assert bucket.statistics().waiting == 0
        return called, granted, grant_times

    called, granted, grant_times = run_virtual(main)
    assert granted == called  # FIFO within each class
    times = sorted(grant_times)
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            assert j - i + 1 <= burst + qps * (times[j] - start) + 1e-6
