"""Whole-file reads from coroutines, through aiofiles (the design card's file-reading package).

Every file the daemon reads on a coroutine's behalf is small and read whole: the delegate and
result caches, NAD and CNI config files, device-info files, the kubelet's checkpoint, the
primary CNI config, the service-account token. :func:`read_bytes` reads one, and
:func:`read_bytes_if_exists` where a missing file is an answer rather than an error. Failures
are the ``OSError`` of ``open``/``read``, unchanged (``FileNotFoundError``,
``PermissionError``, ``IsADirectoryError`` for a directory: open fails, as
``Path.read_bytes`` does), so callers keep their ``except`` clauses and messages. Decoding
what was read is the caller's, on the loop.

Whole-file reads only. aiofiles runs each call in the loop's default executor, so a read is
three thread hops (open, read, close) where ``asyncio.to_thread(Path.read_bytes)`` is one: a
2 KiB read takes ~145 µs (median) against ~50 µs, ~0.1 ms more CPU per read (2-core VM).
Writes do not come here: a write must be crash-safe, and ``multusd.fsutil.atomic_write`` (temp
file, fsync, rename) keeps all of it in one synchronous function, run in one
``asyncio.to_thread`` hop; aiofiles would take nine hops for it (README, "aiofiles").
Directory listings and ``stat`` calls stay ``asyncio.to_thread`` hops of their own.

A read whose caller is cancelled still runs to its end (open, read, close) and is dropped, as a
read in a worker thread was: with aiofiles alone, a cancel during the open hop would leave the
opened file to the garbage collector (a ``ResourceWarning``, an error under the tests).
"""

from __future__ import annotations

import asyncio
import os

import aiofiles

__all__ = ["read_bytes", "read_bytes_if_exists"]

StrPath = str | os.PathLike[str]

_finishing: set[asyncio.Task[bytes]] = set()
"""Reads whose caller was cancelled, kept referenced until they close their file."""


async def _read(path: StrPath) -> bytes:
    async with aiofiles.open(path, "rb") as handle:
        return await handle.read()


async def read_bytes(path: StrPath) -> bytes:
    """The whole content of ``path``; the ``OSError`` of ``open``/``read`` if it fails."""
    reading = asyncio.ensure_future(_read(path))
    try:
        return await asyncio.shield(reading)
    except asyncio.CancelledError:
        if not reading.done():
            _finishing.add(reading)
            reading.add_done_callback(_finishing.discard)
        raise


async def read_bytes_if_exists(path: StrPath) -> bytes | None:
    """:func:`read_bytes`, but ``None`` when ``path`` does not exist (any other error raises)."""
    try:
        return await read_bytes(path)
    except FileNotFoundError:
        return None
