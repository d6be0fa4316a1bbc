"""multusd.cni.pending: cache work that overlaps the rest of a request, awaited before it ends."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from multusd.cni import pending
from multusd.cni.pending import Pending
from tests.waits import eventually


async def _work(done: list[str], name: str, fail: bool = False) -> None:
    await asyncio.sleep(0.01)
    if fail:
        raise OSError(f"{name} failed")
    done.append(name)


async def test_outside_a_collecting_block_the_work_is_awaited_where_it_is_called() -> None:
    done: list[str] = []
    await pending.run(_work(done, "a"))
    assert done == ["a"]


async def test_collected_work_runs_beside_the_caller_and_settle_reports_failures() -> None:
    done: list[str] = []
    writes = Pending()
    with writes.collecting("net1"):
        await pending.run(_work(done, "a"))
    with writes.collecting("net2"):
        await pending.run(_work(done, "b", fail=True))
    assert done == []  # started, not awaited
    failed = await writes.settle()
    assert done == ["a"]
    assert [(label, str(exc)) for label, exc in failed] == [("net2", "b failed")]
    assert await writes.settle() == []  # each operation is reported once


async def test_a_cancelled_settle_leaves_the_work_running_and_nothing_unretrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done: list[str] = []
    ended: list[str] = []

    async def tracked(name: str, fail: bool = False) -> None:
        try:
            await _work(done, name, fail)
        finally:
            ended.append(name)

    writes = Pending()
    with writes.collecting("net1"):
        await pending.run(tracked("a", fail=True))
        await pending.run(tracked("b"))
    waiter = asyncio.create_task(writes.settle())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        await eventually(lambda: len(ended) == 2, what="both operations ended")
        await asyncio.sleep(0)  # their done callbacks, scheduled as they ended, run
        gc.collect()  # an exception nobody retrieved is reported as its task is collected
        await asyncio.sleep(0)
    assert done == ["b"]
    assert [r for r in caplog.records if r.name == "asyncio"] == []
