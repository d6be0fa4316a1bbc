"""Crash-safe file writes: a reader sees the old file or the new one, never half of either.

Synchronous on purpose: async callers run a whole write in one worker-thread hop
(``asyncio.to_thread``), where aiofiles would take one per step. Reads are
``multusd.fileread``'s, which says why the two differ.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(
    path: str | Path,
    data: bytes,
    *,
    mode: int = 0o600,
    dir_mode: int = 0o700,
    sync_dir: bool = True,
    replace: bool = True,
) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory, fsync, rename.

    With ``replace=False`` the temp file is published with ``link`` instead of ``rename``:
    ``link`` fails with ``FileExistsError`` rather than overwrite, so "create only if absent"
    holds without a race.

    Missing parent directories are created with ``dir_mode``. With ``sync_dir`` the directory
    is fsynced after the rename so the new *name* survives a power loss too; per-request cache
    files skip that (the file is still never seen half-written), since a node that loses power
    loses its pod sandboxes with it.
    """
    target = Path(path)
    target.parent.mkdir(mode=dir_mode, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if not sync_dir:
        return
    dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_if_exists(path: str | Path) -> bool:
    """Unlink ``path``; ``False`` if it was already gone (idempotent deletes)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
