"""KeyedLocks and RequestGate: ordering, cleanup, and cancellation."""

from __future__ import annotations

import asyncio

from multusd.server.concurrency import KeyedLocks, RequestGate


async def test_keyed_locks_serialise_one_key_and_clean_up() -> None:
    locks = KeyedLocks()
    order: list[str] = []

    async def job(key: str, name: str) -> None:
        async with locks.hold(key):
            order.append(f"{name}+")
            await asyncio.sleep(0.01)
            order.append(f"{name}-")

    await asyncio.gather(job("a", "1"), job("a", "2"), job("b", "3"))
    assert order.index("1-") < order.index("2+")  # same key: one after the other
    assert order.index("3+") < order.index("1-")  # other key: alongside
    assert len(locks) == 0


async def test_cancelled_waiter_leaves_no_entry() -> None:
    locks = KeyedLocks()
    async with locks.hold("k"):
        waiter = asyncio.create_task(locks.hold("k").__aenter__())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    assert len(locks) == 0


async def test_gate_queues_beyond_the_limit() -> None:
    gate = RequestGate(1)
    running = 0
    peak = 0

    async def job() -> None:
        nonlocal running, peak
        async with gate.slot():
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.gather(*(job() for _ in range(5)))
    assert peak == 1 and gate.waiting == 0


async def test_no_limit_means_no_queue() -> None:
    gate = RequestGate(None)
    async with gate.slot(), gate.slot():
        assert gate.waiting == 0
