"""ContainerQueue and RequestGate: order, caps, supersession, deadlines, cancellation, cleanup."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from cni_shim.errors import CNIError
from multusd.server.concurrency import ContainerQueue, RequestGate
from tests.waits import eventually

FAR = 1e12  # a deadline that never passes


async def _noop() -> None:
    return None


def _later(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


def _recorder(order: list[str]) -> Callable[[str, float], Callable[[], Awaitable[str]]]:
    def job(name: str, seconds: float = 0.01) -> Callable[[], Awaitable[str]]:
        async def work() -> str:
            order.append(f"{name}+")
            try:
                await asyncio.sleep(seconds)
            finally:
                order.append(f"{name}-")
            return name

        return work

    return job


async def test_one_key_is_serialised_other_keys_run_alongside_and_entries_go() -> None:
    queue = ContainerQueue(16, 1024)
    order: list[str] = []
    job = _recorder(order)
    results = await asyncio.gather(
        queue.run("a", job("1", 0.01), deadline=FAR),
        queue.run("a", job("2", 0.01), deadline=FAR),
        queue.run("b", job("3", 0.01), deadline=FAR),
        queue.run(None, job("4", 0.01), deadline=FAR),
    )
    assert results == ["1", "2", "3", "4"]
    assert order.index("1-") < order.index("2+")  # same key: one after the other
    assert order.index("3+") < order.index("1-")  # other key: alongside
    assert order.index("4+") < order.index("1-")  # no key: alongside
    assert len(queue) == 0 and queue.pending == 0


async def test_a_cancelled_waiter_leaves_no_entry() -> None:
    queue = ContainerQueue(16, 1024)
    release = asyncio.Event()
    holder = asyncio.create_task(queue.run("k", release.wait, deadline=FAR))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(queue.run("k", release.wait, deadline=FAR))
    await asyncio.sleep(0)
    assert queue.pending == 2
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert queue.pending == 1
    release.set()
    await holder
    assert len(queue) == 0 and queue.pending == 0


async def test_the_per_container_cap_answers_try_again_later() -> None:
    queue = ContainerQueue(2, 1024)
    release = asyncio.Event()
    held = [asyncio.create_task(queue.run("k", release.wait, deadline=FAR)) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(CNIError) as info:
        await queue.run("k", release.wait, deadline=FAR)
    assert info.value.code == 11
    assert "too many requests for container k" in info.value.msg
    assert "try again later" in info.value.msg
    assert await queue.run("other", _noop, deadline=FAR) is None  # others unaffected
    release.set()
    await asyncio.gather(*held)
    await queue.run("k", _noop, deadline=FAR)  # released
    assert queue.pending == 0


async def test_the_total_cap_answers_try_again_later() -> None:
    queue = ContainerQueue(16, 2)
    release = asyncio.Event()
    held = [asyncio.create_task(queue.run(key, release.wait, deadline=FAR)) for key in ("a", None)]
    await asyncio.sleep(0)
    with pytest.raises(CNIError) as info:
        await queue.run("c", release.wait, deadline=FAR)
    assert info.value.code == 11 and "too many requests in the daemon" in info.value.msg
    release.set()
    await asyncio.gather(*held)
    assert queue.pending == 0


async def test_a_del_supersedes_the_adds_before_it_after_they_unwind() -> None:
    queue = ContainerQueue(16, 1024)
    order: list[str] = []

    async def hung_add() -> None:
        order.append("add+")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # killing plugins, rolling back
            order.append("add rolled back")
            raise

    other_started = asyncio.Event()

    async def not_supersedable() -> None:
        other_started.set()
        await asyncio.Event().wait()

    add = asyncio.create_task(queue.run("k", hung_add, deadline=FAR, supersedable=True))
    await eventually(lambda: order == ["add+"])
    retry = asyncio.create_task(queue.run("k", hung_add, deadline=FAR, supersedable=True))
    other = asyncio.create_task(queue.run("k", not_supersedable, deadline=FAR))
    await eventually(lambda: queue.pending == 3)  # both queued behind the running ADD

    async def delete() -> str:
        order.append("del")
        return "deleted"

    deleted = asyncio.create_task(queue.run("k", delete, deadline=FAR, supersedes=True))
    for task in (add, retry):
        with pytest.raises(CNIError) as info:
            await task
        assert info.value.code == 999
        assert info.value.msg == "superseded by a DEL of the same container"
    # The request that is not supersedable keeps its turn: it runs (or, cancelled by the DEL
    # by mistake, ends), and while it runs the DEL waits behind it.
    await eventually(lambda: other_started.is_set() or other.done())
    assert not other.done(), "a request that is not supersedable is not cancelled"
    assert not deleted.done() and "del" not in order, "the DEL waits for its turn"
    assert queue.pending == 2
    other.cancel()
    assert await deleted == "deleted"
    assert order == ["add+", "add rolled back", "del"]
    assert queue.pending == 0


async def test_a_superseding_del_is_admitted_beyond_the_caps() -> None:
    queue = ContainerQueue(1, 1)
    add = asyncio.create_task(queue.run("k", asyncio.Event().wait, deadline=FAR, supersedable=True))
    await asyncio.sleep(0)
    assert await queue.run("k", _noop, deadline=FAR, supersedes=True) is None
    with pytest.raises(CNIError, match="superseded"):
        await add
    # A DEL with nothing to supersede is capped like anything else.
    hold = asyncio.create_task(queue.run("k", asyncio.Event().wait, deadline=FAR))
    await asyncio.sleep(0)
    with pytest.raises(CNIError, match="try again later"):
        await queue.run("k", _noop, deadline=FAR, supersedes=True)
    hold.cancel()
    await asyncio.gather(hold, return_exceptions=True)


async def test_deadlines_bound_the_wait_and_the_work() -> None:
    queue = ContainerQueue(16, 1024)
    hold = asyncio.create_task(queue.run("k", asyncio.Event().wait, deadline=_later(0.2)))
    await asyncio.sleep(0)
    with pytest.raises(CNIError) as waited:
        await queue.run("k", _noop, deadline=_later(0.1))
    assert waited.value.code == 11
    assert "passed while it waited behind an earlier request for container k" in waited.value.msg
    with pytest.raises(CNIError) as ran:
        await hold
    assert ran.value.code == 11 and "ran past its deadline" in ran.value.msg
    assert queue.pending == 0


async def test_cancelling_the_caller_cancels_the_work_and_waits_for_it() -> None:
    queue = ContainerQueue(16, 1024)
    started, unwinding, unwound = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            unwinding.set()
            await asyncio.sleep(0.05)  # killing plugins, rolling back
            unwound.set()
            raise

    caller = asyncio.create_task(queue.run("k", work, deadline=FAR))
    await started.wait()
    caller.cancel()
    await unwinding.wait()
    caller.cancel()  # a second cancellation does not cut the unwinding short
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert unwound.is_set()
    assert queue.pending == 0 and len(queue) == 0


async def test_cancel_all_cancels_everything_and_answers_try_again_later() -> None:
    queue = ContainerQueue(16, 1024)
    tasks = [
        asyncio.create_task(queue.run(key, asyncio.Event().wait, deadline=FAR))
        for key in ("a", "a", "b", None)
    ]
    await asyncio.sleep(0)
    await queue.cancel_all(grace=5)
    for task in tasks:
        with pytest.raises(CNIError) as info:
            await task
        assert info.value.code == 11 and "shutting down" in info.value.msg
    assert queue.pending == 0


async def test_cancel_all_cuts_a_slow_unwinding_short() -> None:
    queue = ContainerQueue(16, 1024)

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(3600)  # a rollback that hangs

    task = asyncio.create_task(queue.run("k", stubborn, deadline=FAR))
    await asyncio.sleep(0)
    await queue.cancel_all(grace=0.1)
    with pytest.raises(CNIError):
        await task


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


async def test_gate_serves_urgent_requests_first_and_survives_cancelled_waiters() -> None:
    gate = RequestGate(1)
    order: list[str] = []
    release = asyncio.Event()

    async def job(name: str, *, urgent: bool = False, hold: bool = False) -> None:
        async with gate.slot(urgent=urgent):
            order.append(name)
            if hold:
                await release.wait()

    first = asyncio.create_task(job("first", hold=True))
    await asyncio.sleep(0)
    add = asyncio.create_task(job("add"))
    gone = asyncio.create_task(job("gone"))
    await asyncio.sleep(0)
    delete = asyncio.create_task(job("del", urgent=True))
    await asyncio.sleep(0)
    assert gate.waiting == 3
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    release.set()
    await asyncio.gather(first, add, delete)
    assert order == ["first", "del", "add"]
    assert gate.waiting == 0
    async with gate.slot():  # the slot count came back
        pass


async def test_a_superseding_del_inherits_the_slot_of_the_add_it_cancels() -> None:
    # connectionLimit 2: two hung ADDs hold the slots and a third ADD waits for one. The DEL of
    # the first must get its slot, not the waiting ADD (which would hang in its turn).
    gate = RequestGate(2)
    queue = ContainerQueue(16, 1024, gate)
    running: list[int] = []

    async def hang() -> None:
        running.append(1)
        await asyncio.Event().wait()

    first = asyncio.create_task(queue.run("a", hang, deadline=FAR, supersedable=True))
    second = asyncio.create_task(queue.run("b", hang, deadline=FAR, supersedable=True))
    await eventually(lambda: len(running) == 2)  # both slots held
    third = asyncio.create_task(queue.run("c", hang, deadline=FAR, supersedable=True))
    await eventually(lambda: gate.waiting == 1)  # the third waits for a slot
    third_waited = []

    async def delete() -> None:
        third_waited.append(gate.waiting == 1)

    async with asyncio.timeout(5):
        await queue.run("a", delete, deadline=FAR, supersedes=True, urgent=True)
    assert third_waited == [True], "the DEL ran in the slot of the ADD it superseded"
    with pytest.raises(CNIError, match="superseded"):
        await first
    assert gate.waiting == 0, "the waiting ADD got the slot the DEL gave back"
    for task in (second, third):
        task.cancel()
    await asyncio.gather(second, third, return_exceptions=True)
