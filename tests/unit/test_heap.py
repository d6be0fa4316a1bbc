"""multusd.heap: the heap is trimmed once the daemon is idle, never during a burst."""

from __future__ import annotations

import asyncio

from multusd.heap import IdleTrim, return_freed_memory
from tests.waits import eventually


async def test_the_heap_is_trimmed_once_idle_and_not_while_busy() -> None:
    trims: list[float] = []
    heap = IdleTrim(delay=0.05, trim=lambda: trims.append(asyncio.get_running_loop().time()))
    heap.busy()
    heap.idle()
    heap.busy()  # another request started before the delay passed
    # Nothing to wait for: that no trim comes shows only as time passing (twice the delay).
    await asyncio.sleep(0.1)
    assert trims == []
    heap.idle()
    await eventually(lambda: trims != [])
    assert len(trims) == 1


def test_return_freed_memory_runs() -> None:
    return_freed_memory()  # glibc here; a no-op without malloc_trim
