"""A plugin's process group, ended as one: terminated, killed if it lingers, and reaped.

asyncio kills and reaps only the process it started. A plugin is often more than that (a
script's ``sleep`` child outlives a killed shell; ``bridge`` runs ``host-local`` as its IPAM
child), and whatever of it is left keeps holding netns and IPAM state. So
:class:`multusd.cni.invoke.SubprocessExecutor` starts each plugin as the leader of its own
process group and, on a timeout or a cancellation, hands it to :func:`kill_and_reap`: the group
is signalled, the plugin reaped before control returns, and the rest of its group waited for
(:data:`REAP_WAIT`) and reaped; :func:`adopt_orphans` makes the daemon the subreaper that
inherits (and so can reap) the members whose parent died first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

REAP_WAIT = 1.0
"""How long a killed group's other members are waited for after the plugin itself is reaped."""


def adopt_orphans() -> bool:
    """Make this process a child subreaper, so a killed plugin's descendants are reparented here.

    A shell plugin killed with its group leaves its children (already killed) to be reaped by
    whoever inherits them: PID 1, which in a container may be the daemon itself and otherwise
    may never reap them. As a subreaper the daemon inherits them and :class:`SubprocessExecutor`
    reaps every member of a group it killed. Process-wide, hence called once by the daemon, not
    by the executor. ``False`` where ``prctl`` is unavailable (the orphans then go to PID 1).
    """
    import ctypes  # only the daemon pays for it, once

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


_PR_SET_CHILD_SUBREAPER = 36


async def kill_and_reap(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM, ``grace`` seconds, SIGKILL, then wait for the exit -- even if cancelled again.

    A repeated cancellation while we reap is absorbed and re-raised afterwards, so the caller
    never gets control back while the plugin still exists.
    """
    reaper = asyncio.ensure_future(_terminate(proc, grace))
    cancelled = False
    while not reaper.done():
        try:
            await asyncio.shield(reaper)
        except asyncio.CancelledError:
            if reaper.cancelled():
                break
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _reap_group(pgid: int) -> bool:
    """Reap the group's exited members that are our children; ``True`` while any remain.

    Called only once the leader itself is reaped, so it can never take the leader's status
    from asyncio's child watcher. Members are our children when we are a subreaper
    (:func:`adopt_orphans`) or PID 1.
    """
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-pgid, os.WNOHANG)[0]:
            pass
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _terminate(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM to the group, ``grace`` seconds, SIGKILL to the group, reap.

    The grace ends early once the leader is gone and no member of its group is left. The group
    id is the leader's pid, which cannot be reused before the leader is reaped; after that a
    signal is only sent while the group still has members, so it cannot reach a stranger.
    """
    pgid = proc.pid  # start_new_session: the plugin leads its own group
    if proc.returncode is None or _reap_group(pgid):
        _signal_group(pgid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(grace):
            await proc.wait()
            await _group_gone(pgid)
    if proc.returncode is None or _reap_group(pgid):
        _signal_group(pgid, signal.SIGKILL)
    await proc.wait()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(REAP_WAIT):
            await _group_gone(pgid)


async def _group_gone(pgid: int) -> None:
    """Until no member of the group is left. The kernel has no notification for a group
    emptying (a pidfd is per process, and members are not our children), so it is polled."""
    while _reap_group(pgid):  # noqa: ASYNC110 - nothing to wait on but time
        await asyncio.sleep(0.01)
