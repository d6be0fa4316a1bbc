"""multusd.heap: the heap is trimmed once the daemon is idle, never during a burst, and the trim
hands the C heap's free pages back to the kernel."""

from __future__ import annotations

import asyncio
import ctypes
from pathlib import Path

import pytest

from multusd.heap import IdleTrim, return_freed_memory
from tests.waits import eventually


async def test_the_heap_is_trimmed_once_idle_and_not_while_busy() -> None:
    loop = asyncio.get_running_loop()
    trims: list[float] = []
    heap = IdleTrim(delay=0.05, trim=lambda: trims.append(loop.time()))
    heap.busy()
    assert heap.due is None
    heap.idle()
    assert heap.due is not None
    heap.busy()  # another request started before the delay passed
    assert heap.due is None, "no trim can come while a request runs"
    heap.idle()
    idle_at = loop.time()
    await eventually(lambda: trims != [])
    # One trim, a full delay after the *last* idle: the first one's was cancelled (had it run,
    # it would have run first, earlier than this bound).
    assert len(trims) == 1
    assert trims[0] >= idle_at + heap.delay
    assert heap.due is None


def _rss_anon_kib() -> int:
    """This process's resident anonymous memory (the heap's pages among it), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


def test_return_freed_memory_hands_free_heap_pages_back_to_the_kernel() -> None:
    """What glibc keeps after a burst: blocks freed in the middle of the heap (a block still in
    use above them pins its top, so ``free`` cannot shrink it) stay resident until trimmed."""
    libc = ctypes.CDLL(None)
    if getattr(libc, "malloc_trim", None) is None:
        pytest.skip("no malloc_trim (not glibc): return_freed_memory does nothing")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block, count = 32 * 1024, 1024  # 32 MiB in blocks below the mmap threshold: in the heap
    freed_kib = block * (count - 1) // 1024
    blocks = [libc.malloc(block) for _ in range(count)]
    assert all(blocks)
    try:
        for address in blocks:
            ctypes.memset(address, 1, block)  # resident, not just reserved
        before = _rss_anon_kib()
        for address in blocks[:-1]:
            libc.free(address)
        held = _rss_anon_kib()
        assert held > before - freed_kib // 4, "free() alone kept most of them (the premise)"
        return_freed_memory()
        after = _rss_anon_kib()
        assert held - after > freed_kib // 2, (before, held, after)
    finally:
        libc.free(blocks[-1])
