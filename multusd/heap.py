"""The C heap's free pages, handed back to the kernel: after a relist, and when the daemon
goes idle.

glibc's allocator keeps freed memory in its arenas for reuse; fragmented by many short-lived
requests (a burst, a fuzzer) it does not shrink by itself, and in a memory-limited container
every page it keeps counts against the limit (docs/performance.md, "Under a memory limit").
Python's own allocator returns its arenas as they empty; ``malloc_trim(0)`` does the same for
glibc's, in well under a millisecond when idle. Without ``malloc_trim`` (musl) nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Callable

_LIBC = ctypes.CDLL(None)

IDLE_TRIM_DELAY = 1.0
"""Seconds without a request before the heap is trimmed (a burst is not interrupted)."""


def return_freed_memory() -> None:
    """``malloc_trim(0)``: give the C heap's free pages back to the kernel."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


class IdleTrim:
    """Trims the heap once the daemon has had no request for ``delay`` seconds."""

    def __init__(
        self, delay: float = IDLE_TRIM_DELAY, trim: Callable[[], None] = return_freed_memory
    ) -> None:
        self.delay = delay
        self._trim = trim
        self._handle: asyncio.TimerHandle | None = None

    @property
    def due(self) -> float | None:
        """When (the loop's time) the next trim runs; ``None`` while none is scheduled, as
        during a request. Lets a caller see that no trim can come, which waiting cannot show."""
        return self._handle.when() if self._handle is not None else None

    def busy(self) -> None:
        """A request started: no trim while it runs."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def idle(self) -> None:
        """The last request ended: trim after ``delay`` unless another one starts."""
        self.busy()
        self._handle = asyncio.get_running_loop().call_later(self.delay, self._run)

    def _run(self) -> None:
        self._handle = None
        self._trim()


M_ARENA_MAX = -8
M_MMAP_THRESHOLD = -3
ARENAS = 2
"""glibc's malloc arenas: one per thread by default (up to 8 per core), each holding on to what
its thread freed; the daemon's few worker threads (file I/O, netns, the log writer, watchfiles)
each grew one. Two are enough for threads that are idle most of the time."""
MMAP_THRESHOLD = 128 * 1024
"""Allocations this big or bigger are mmapped and unmapped when freed. glibc raises the
threshold by itself as big blocks are freed (up to 32 MiB), after which such blocks (asyncio's
256 KiB socket reads, decoded list pages) stay in the heap; a fixed value stops that."""


def tune_allocator() -> bool:
    """Fewer arenas and a fixed mmap threshold, before any thread starts; ``False`` without
    glibc's ``mallopt``. Measured under a 50 Mi limit: docs/performance.md."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_ARENA_MAX, ARENAS)) and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
