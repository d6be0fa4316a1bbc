"""Waiting in tests for something to happen, instead of sleeping until it probably has.

A fixed sleep says "by now the watch is armed, the plugin runs, the line is written", which a
loaded machine (two cores shared by several test sessions) makes false now and then; a wait on
the condition itself ends as soon as it holds and lasts as long as it must. Every timeout here
only keeps a broken test from hanging.

Some conditions are seen only in ``/proc``: that a process has armed an inotify watch on a
directory (watchfiles gives no sign of it) is read from the watch list the kernel keeps for
each inotify descriptor (``/proc/<pid>/fdinfo/<fd>``). That works for this process and, as
root, for a daemon running as a subprocess.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


async def eventually(
    check: Callable[[], Any],
    timeout: float = 30,
    interval: float = 0.02,
    *,
    what: str = "",
) -> Any:
    """Poll ``check`` (a function, or a coroutine function) until it returns something truthy,
    and return that; the timeout only keeps a broken test from hanging, and its failure names
    ``what`` was waited for."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        held = check()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return held
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(interval)


def _kernel_dev(st_dev: int) -> int:
    """``st_dev`` as the kernel prints a superblock's device in fdinfo (``sdev:``): its
    internal encoding, major in the bits above 20, not the one ``stat`` returns."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


def inotify_watches(path: str | Path, pid: int | str = "self") -> int:
    """How many inotify watches process ``pid`` holds on ``path`` (the inode it names now)."""
    st = os.stat(path)
    wanted = f" ino:{st.st_ino:x} sdev:{_kernel_dev(st.st_dev):x} "
    count = 0
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if os.readlink(f"{fds}/{fd}") != "anon_inode:inotify":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue  # closed while we looked
        count += sum(
            1 for line in info.splitlines() if line.startswith("inotify ") and wanted in line
        )
    return count


async def until_watched(path: str | Path, pid: int | str = "self", timeout: float = 30) -> None:
    """Wait until process ``pid`` has an inotify watch armed on the directory ``path``: from
    then on a change there reaches the watcher (the kernel queues the events)."""
    await eventually(lambda: inotify_watches(path, pid) > 0, timeout)


def child_states(pid: int | str = "self") -> dict[int, str]:
    """Process ``pid``'s children and the state of each (``S``, ``R``; ``Z`` for a zombie), from
    the lists the kernel keeps per thread (``/proc/<pid>/task/<tid>/children``)."""
    found: dict[int, str] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            listed = (task / "children").read_text().split()
        except OSError:
            continue  # a thread that ended while we looked
        for child in map(int, listed):
            try:
                stat = Path(f"/proc/{child}/stat").read_text()
            except OSError:
                continue  # reaped since
            found[child] = stat[stat.rfind(")") + 2 :].split()[0]
    return found


def group_members(pgid: int, *, zombies: bool = True) -> list[int]:
    """Every process whose process group is ``pgid`` (without ``zombies``: only those still
    running; a zombie was killed and waits for whoever inherited it to reap it)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold anything, so split after its ")".
        state, _ppid, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and (zombies or state != "Z"):
            members.append(int(entry.name))
    return members
