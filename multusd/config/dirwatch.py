"""Watching a directory for as long as the daemon runs, whatever happens to it.

Upstream's fsnotify watch dies silently when the directory is removed or replaced; this one is
on the directory, notices a new directory at the path and re-arms, and polls (one tick at a
time) while there is no directory to watch. Batches are debounced by watchfiles, and a periodic
tick (an empty batch) lets the owner retry what failed and notice a dead watch.

A new directory is told from the watched one by its device and inode, and the watched one is
held open while it is watched (:func:`pin`): otherwise ``rm -rf`` and ``mkdir`` of the same
path hand the new directory the inode number the old one just freed (ext4 does, at once), the
two look the same, and the watch stays on the removed one, seeing nothing ever again.
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
    passed: Callable[[], None] = lambda: None,
) -> None:
    """Run ``sync`` on every batch of ``relevant`` changes in ``directory``, and on a tick
    while ``retry_due()``; runs until cancelled.

    ``sync`` also runs whenever the watch is (re)armed, to catch up with what happened while
    nothing watched, and once more on the first batch or tick after (the race window between
    that catch-up and the watch being armed).

    ``passed`` is called at the end of every pass: each batch or tick the watch has finished
    with (its ``sync``, if any, done, or the re-arm decided). It exists for tests and metrics:
    that a change changed nothing shows only as passes made since, not as anything written.
    """
    warned = False
    while True:
        pinned = await asyncio.to_thread(pin, directory)
        if pinned is None:
            await asyncio.sleep(tick)
            continue
        fd, dir_id = pinned
        try:
            await sync()  # catch up with what happened while nothing watched
            await _watch_until_replaced(
                directory, dir_id, sync=sync, relevant=relevant, retry_due=retry_due,
                step_ms=step_ms, debounce_ms=debounce_ms, tick=tick, passed=passed,
            )  # fmt: skip
            warned = False
        except (OSError, RuntimeError) as exc:
            if not isinstance(exc, FileNotFoundError) and not warned:
                log.warning("cannot watch %s (%s); retrying", directory, exc)
                warned = True
            await asyncio.sleep(tick)
        finally:
            os.close(fd)


async def _watch_until_replaced(
    directory: str,
    watched: DirId,
    *,
    sync: Callable[[], Awaitable[None]],
    relevant: Callable[[Change, str], bool],
    retry_due: Callable[[], bool],
    step_ms: int,
    debounce_ms: int,
    tick: float,
    passed: Callable[[], None],
) -> None:
    """Sync on each batch (and on ticks while a retry is due); return when the dir changes.
    ``passed()`` after each batch or tick."""
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
            if await asyncio.to_thread(dir_id, directory) != watched:
                log.info("%s was removed or replaced; re-arming the watch", directory)
                passed()
                return
            if batch or armed or retry_due():
                armed = False
                await sync()
            passed()


def pin(directory: str) -> tuple[int, DirId] | None:
    """``directory`` opened, and its identity; ``None`` when there is none.

    The descriptor is held while the directory is watched and closed after: while it is open
    the directory's inode is not freed even once the directory is removed, so a directory made
    at the path meanwhile gets another number and :func:`dir_id` tells the two apart.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    st = os.fstat(fd)
    return fd, (st.st_dev, st.st_ino)


def dir_id(directory: str) -> DirId | None:
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
