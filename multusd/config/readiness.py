"""The readiness indicator file: wait for it at start-up, then notice when it is gone for good.

The primary CNI plugin (flannel, calico, OVN, ...) writes this file once the default network works.
Upstream waits for it before starting (1 s polls, 45 s budget, exit 1) and, in auto mode, exits 2 as
soon as fsnotify reports a Remove or Rename of it, so the kubelet restarts the daemon and it waits
for the network again (docs/upstream.md, "Readiness indicator"). This module is the only reader of
the file: requests never stat it, because a per-request ``stat()`` inside the container sporadically
failed upstream and turned into 45 s of CNI latency.

Two changes from upstream, both deliberate:

* A file that disappears and comes back within ``rotation_grace`` is a *rotation*, not a loss.
  Writers that replace the file non-atomically (unlink, then create) otherwise kill the daemon,
  a pain point upstream users report. An atomic replace (rename over the file) never even shows
  a gap: we judge the file by its existence after each batch of events, not by event type.
* The watch is on the file's *directory*, and it survives that directory being removed, re-created
  or swapped: an inotify watch on the file itself is one-shot (it follows the old inode), and one on
  a removed directory goes silent (docs/performance.md, "Watching a file with watchfiles"). While
  the directory is missing, or the watcher cannot be armed, we poll every ``poll_interval`` like
  upstream does. A periodic re-check (every ``poll_interval`` even when no event arrives) closes the
  race between the first stat and the watch being armed, and covers changes that produce no event in
  the directory (a symlinked target going dangling).

All stats run in a worker thread, so a hung filesystem (NFS, FUSE) never blocks the loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
from contextlib import aclosing
from dataclasses import dataclass

from watchfiles import awatch

from cni_shim.errors import INTERNAL, CNIError
from multusd.errors import EXIT_CONFIG, StartupError

log = logging.getLogger(__name__)

# watchfiles batching: wait ``_STEP_MS`` of quiet after a change and at most ``_DEBOUNCE_MS`` in all
# before yielding. Measured latency with these values is ~20-40 ms on a loaded machine
# (docs/performance.md, "Watching a file with watchfiles"); the defaults (50 ms / 1.6 s) would only
# delay the decision without saving any work.
_STEP_MS = 20
_DEBOUNCE_MS = 100

DirId = tuple[int, int]


@dataclass(frozen=True, slots=True)
class ReadinessSettings:
    """Timing of the readiness checks; the defaults are upstream's, plus the rotation grace.

    ``rotation_grace`` defaults to 5 s. It must comfortably exceed our own detection latency in
    the worst case (directory removed and re-created: up to one ``poll_interval``, plus a thread
    hop), and a shell-script or agent that unlinks and re-creates the file on a loaded node,
    which takes milliseconds to a second or two. It must stay short against what a real loss
    costs: until it expires ``00-multus.conf`` stays in place and new pods are still sent to
    Multus, whose delegate (the primary) may not be ready. 5 s is well under the kubelet's first
    restart back-off (10 s) and the 45 s start-up budget that follows a restart, so a real outage
    is acted on at almost the same time as upstream.
    """

    poll_interval: float = 1.0
    startup_timeout: float = 45.0
    rotation_grace: float = 5.0

    def __post_init__(self) -> None:
        if self.poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {self.poll_interval}")
        if self.startup_timeout < 0:
            raise ValueError(f"startup_timeout must not be negative, got {self.startup_timeout}")
        if self.rotation_grace < 0:
            raise ValueError(f"rotation_grace must not be negative, got {self.rotation_grace}")


@dataclass(slots=True)
class Looks:
    """How many times a watcher has looked at the file (a stat, after a batch of events, a
    periodic re-check or a poll) and acted on what it saw.

    It exists for tests and metrics, and costs an increment or two per stat: that the watcher
    saw a change and did *nothing* shows only as looks made since the change, so a test waits
    for the counts to pass the values it read before (events) or after the change (looks: by
    two, as the first may have begun before it) instead of sleeping and hoping it has looked.
    A look is counted when its stat answers, and what the watcher does about it (return, log
    the file gone or back) follows before any other task runs.
    """

    count: int = 0
    """Every look."""
    after_events: int = 0
    """The looks that followed a batch of events in the directory (the others are the first,
    the periodic re-checks and the polls)."""


async def wait_for_file(
    path: str, settings: ReadinessSettings, *, looks: Looks | None = None
) -> None:
    """Return once ``path`` exists; raise ``StartupError`` (exit 1) after ``startup_timeout``.

    Upstream polls every second; we react to the directory watch at once and still re-check
    every ``poll_interval``, so the daemon starts as soon as the primary network is ready.
    ``looks`` counts the stats (for tests and metrics).
    """
    target = _resolve(path)
    looks = Looks() if looks is None else looks
    try:
        async with asyncio.timeout(settings.startup_timeout):
            await _wait_presence(target, want=True, settings=settings, looks=looks)
            return
    except TimeoutError:
        # One last look: the file may have appeared just as the budget ran out.
        if await _exists(target, looks):
            return
    raise StartupError(_not_ready(path), EXIT_CONFIG)


async def stat_per_request(
    path: str, settings: ReadinessSettings, *, looks: Looks | None = None
) -> None:
    """The seed's per-request check, kept as a benchmark-only switch (``benchmarkReadinessStat``).

    Every ADD and CHECK stats the file from a thread and, while it is missing, re-stats every
    ``poll_interval`` for up to ``startup_timeout``: a flapping file stalls requests for up to
    45 s and then fails them, where the watch exits the daemon once and lets the kubelet retry.
    ``looks`` counts the stats (for tests and metrics).
    """
    target = _resolve(path)
    looks = Looks() if looks is None else looks
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.startup_timeout
    while not await _exists(target, looks):
        if loop.time() + settings.poll_interval > deadline:
            raise CNIError(INTERNAL, _not_ready(path))
        await asyncio.sleep(settings.poll_interval)


def _not_ready(path: str) -> str:
    """Upstream's wording, with the configured (raw) path: operators search for it."""
    return (
        "have you checked that your default network is ready? still waiting for "
        f"readinessindicatorfile @ {path}. "
        "pollimmediate error: timed out waiting for the condition"
    )


async def watch_until_removed(
    path: str, settings: ReadinessSettings, *, looks: Looks | None = None
) -> str:
    """Run until ``path`` is gone for good, then return the reason (for the supervisor's log).

    "Gone for good" means missing (removed, moved away, or its directory removed) and still
    missing ``rotation_grace`` seconds later; each disappearance gets a fresh grace window. The
    caller owns the consequences (remove ``00-multus.conf``, exit 2); this function never exits
    the process. Cancelling it stops the watcher thread promptly. ``looks`` counts the stats
    (for tests and metrics).
    """
    target = _resolve(path)
    looks = Looks() if looks is None else looks
    while True:
        await _wait_presence(target, want=False, settings=settings, looks=looks)
        log.info(
            "readiness indicator file %s is gone; waiting %gs for it to come back",
            target,
            settings.rotation_grace,
        )
        try:
            async with asyncio.timeout(settings.rotation_grace):
                await _wait_presence(target, want=True, settings=settings, looks=looks)
        except TimeoutError:
            if not await _exists(target, looks):
                return f"readinessindicatorfile {path} was removed"
        log.info("readiness indicator file %s is back (rotated); still watching", target)


def _resolve(path: str) -> str:
    """Upstream's ``filepath.Abs(filepath.Clean(p))``, done once, against the start-up cwd."""
    return os.path.abspath(path)


async def _wait_presence(
    target: str, *, want: bool, settings: ReadinessSettings, looks: Looks
) -> None:
    """Return once the existence of ``target`` equals ``want``.

    Watches the parent directory when it exists and the watcher can be armed; polls otherwise,
    and re-arms whenever the directory is replaced (a new inode means the old watch is dead).
    """
    directory = os.path.dirname(target)
    warned = False
    while True:
        present, dir_id = await _look(target, directory, looks)
        if present == want:
            return
        if dir_id is None:
            await asyncio.sleep(settings.poll_interval)
            continue
        try:
            if await _watch_directory(
                target, directory, dir_id, want=want, settings=settings, looks=looks
            ):
                return
            warned = False
        except (OSError, RuntimeError) as exc:
            # The directory vanished before the watch was armed (FileNotFoundError, routine),
            # or inotify limits / a dead watcher thread: poll for one round, then try to watch
            # again. Log the unusual cases once per streak, not once per second.
            if not isinstance(exc, FileNotFoundError) and not warned:
                log.warning(
                    "cannot watch %s (%s); polling every %gs",
                    directory,
                    exc,
                    settings.poll_interval,
                )
                warned = True
            await asyncio.sleep(settings.poll_interval)


async def _watch_directory(
    target: str,
    directory: str,
    dir_id: DirId,
    *,
    want: bool,
    settings: ReadinessSettings,
    looks: Looks,
) -> bool:
    """Watch ``directory`` until ``target``'s existence equals ``want`` (``True``) or the watch
    goes stale because the directory was removed or replaced (``False``).

    Every batch is treated as "something changed, look again": rename-over shows up as
    ``added``, polling backends as ``modified``, so event types are not trusted. The empty
    batches from ``yield_on_timeout`` are the periodic re-check.
    """
    changes = awatch(
        directory,
        watch_filter=None,
        recursive=False,
        step=_STEP_MS,
        debounce=_DEBOUNCE_MS,
        rust_timeout=max(1, round(settings.poll_interval * 1000)),
        yield_on_timeout=True,
    )
    # aclosing: leaving the loop early (return) must stop the watcher thread now, not at GC.
    async with aclosing(changes):
        async for batch in changes:
            present, current = await _look(target, directory, looks, after_events=bool(batch))
            if present == want:
                return True
            if current != dir_id:
                return False
    return False


async def _look(
    target: str, directory: str, looks: Looks, *, after_events: bool = False
) -> tuple[bool, DirId | None]:
    """:func:`_probe` in a worker thread, counted once it has answered."""
    seen = await asyncio.to_thread(_probe, target, directory)
    looks.count += 1
    looks.after_events += after_events
    return seen


def _probe(target: str, directory: str) -> tuple[bool, DirId | None]:
    """One stat of the file (following symlinks, as upstream's ``os.Stat``) and its directory."""
    try:
        st = os.stat(directory)
    except OSError:
        dir_id = None
    else:
        dir_id = (st.st_dev, st.st_ino)
    return os.path.exists(target), dir_id


async def _exists(target: str, looks: Looks) -> bool:
    present = await asyncio.to_thread(os.path.exists, target)
    looks.count += 1
    return present
