"""Watching ``multusAutoconfigDir`` for as long as the daemon runs, whatever happens to it.

Upstream's fsnotify watch dies silently when the directory is removed or replaced; this one is
on the directory, notices a new inode and re-arms, and polls (one tick at a time) while there
is no directory to watch. Batches are debounced by watchfiles, and a periodic tick (an empty
batch) lets the owner retry what failed and notice a dead watch.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import aclosing

from watchfiles import Change, awatch

log = logging.getLogger(__name__)

DirId = tuple[int, int]


async def watch_directory(
    directory: str,
    sync: Callable[[], Awaitable[None]],
    *,
    relevant: Callable[[Change, str], bool],
    retry_due: Callable[[], bool],
    step_ms: int,
    debounce_ms: int,
    tick: float,
) -> None:
    """Run ``sync`` on every batch of ``relevant`` changes in ``directory``, and on a tick
    while ``retry_due()``; runs until cancelled.

    ``sync`` also runs whenever the watch is (re)armed, to catch up with what happened while
    nothing watched, and once more on the first batch or tick after (the race window between
    that catch-up and the watch being armed).
    """
    warned = False
    while True:
        dir_id = await asyncio.to_thread(_dir_id, directory)
        if dir_id is None:
            await asyncio.sleep(tick)
            continue
        try:
            await sync()  # catch up with what happened while nothing watched
            await _watch_until_replaced(
                directory, dir_id, sync=sync, relevant=relevant, retry_due=retry_due,
                step_ms=step_ms, debounce_ms=debounce_ms, tick=tick,
            )  # fmt: skip
            warned = False
        except (OSError, RuntimeError) as exc:
            if not isinstance(exc, FileNotFoundError) and not warned:
                log.warning("cannot watch %s (%s); retrying", directory, exc)
                warned = True
            await asyncio.sleep(tick)


async def _watch_until_replaced(
    directory: str,
    dir_id: DirId,
    *,
    sync: Callable[[], Awaitable[None]],
    relevant: Callable[[Change, str], bool],
    retry_due: Callable[[], bool],
    step_ms: int,
    debounce_ms: int,
    tick: float,
) -> None:
    """Sync on each batch (and on ticks while a retry is due); return when the dir changes."""
    changes = awatch(
        directory,
        watch_filter=relevant,
        recursive=False,
        step=step_ms,
        debounce=debounce_ms,
        rust_timeout=max(1, round(tick * 1000)),
        yield_on_timeout=True,
    )
    armed = True  # once more after the watch is armed (race window)
    async with aclosing(changes):
        async for batch in changes:
            if await asyncio.to_thread(_dir_id, directory) != dir_id:
                log.info("%s was removed or replaced; re-arming the watch", directory)
                return
            if batch or armed or retry_due():
                armed = False
                await sync()


def _dir_id(directory: str) -> DirId | None:
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
