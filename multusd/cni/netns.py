"""Network-namespace work, done in a throwaway thread.

``setns(2)`` changes the namespace of the calling *thread*. Doing it on the event loop's thread
or on a pooled worker would leak the pod's namespace into unrelated work, so each call gets a
fresh thread that enters the namespace, does its syscalls and exits; nothing needs restoring.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

from cni_shim.errors import IO_FAILURE, CNIError

CLONE_NEWNET = 0x40000000
_T = TypeVar("_T")
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


async def run_in_netns(netns_path: str, func: Callable[[], _T]) -> _T:
    """Run ``func`` in a new thread that has joined the namespace at ``netns_path``."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def deliver(ok: bool, value: object) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)  # type: ignore[arg-type]
        else:
            assert isinstance(value, BaseException)
            future.set_exception(value)

    def worker() -> None:
        try:
            fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            outcome: tuple[bool, object] = (True, func())
        except BaseException as exc:  # delivered to the awaiting task
            outcome = (False, exc)
        loop.call_soon_threadsafe(deliver, *outcome)

    threading.Thread(target=worker, name="netns", daemon=True).start()
    return await future


def _link_exists(ifname: str) -> bool:
    try:
        socket.if_nametoindex(ifname)
    except OSError:
        return False
    return True


async def validate_ifname(netns_path: str, ifname: str) -> None:
    """Upstream ``validateIfName``: the namespace must exist and hold no link named ``ifname``."""
    try:
        exists = await run_in_netns(netns_path, lambda: _link_exists(ifname))
    except FileNotFoundError as exc:
        raise CNIError(
            IO_FAILURE,
            f"validateIfName: no net namespace {netns_path} found: "
            f'failed to Statfs "{netns_path}": no such file or directory',
        ) from exc
    except OSError as exc:
        raise CNIError(
            IO_FAILURE, f"validateIfName: cannot enter net namespace {netns_path}: {exc}"
        ) from exc
    if exists:
        raise CNIError(IO_FAILURE, f"validateIfName: interface name {ifname} already exists")
