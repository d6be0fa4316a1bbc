"""Whole-file reads through aiofiles: the bytes, or the ``OSError`` ``open`` raises, unchanged;
a cancelled read still closes its file."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import os
from pathlib import Path

import pytest

from multusd.fileread import read_bytes, read_bytes_if_exists
from tests.waits import eventually


async def test_reads_the_whole_file(tmp_path: Path) -> None:
    data = os.urandom(200_000)  # more than one buffer's worth
    (tmp_path / "cache").write_bytes(data)
    assert await read_bytes(tmp_path / "cache") == data
    assert await read_bytes(str(tmp_path / "cache")) == data
    assert await read_bytes_if_exists(tmp_path / "cache") == data
    (tmp_path / "empty").write_bytes(b"")
    assert await read_bytes(tmp_path / "empty") == b""


async def test_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(FileNotFoundError) as info:
        await read_bytes(missing)
    assert info.value.errno == errno.ENOENT
    assert info.value.filename == str(missing)  # as Path.read_bytes: callers quote it
    assert await read_bytes_if_exists(missing) is None
    with pytest.raises(FileNotFoundError):  # a missing directory on the way is the same
        await read_bytes(missing / "file")


async def test_a_directory_is_an_error_even_when_missing_is_not(tmp_path: Path) -> None:
    for read in (read_bytes, read_bytes_if_exists):
        with pytest.raises(IsADirectoryError) as info:
            await read(tmp_path)
        assert info.value.errno == errno.EISDIR


async def test_a_file_on_the_way_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        await read_bytes_if_exists(tmp_path / "file" / "child")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
async def test_permission_denied(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"x")
    secret.chmod(0)
    with pytest.raises(PermissionError):
        await read_bytes_if_exists(secret)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_cancelled_read_still_closes_its_file(tmp_path: Path) -> None:
    """Cancelled at every step (open, read, close), no file is left open, nor to the garbage
    collector (whose ``ResourceWarning`` the test settings turn into a failure)."""
    path = tmp_path / "cache"
    path.write_bytes(b"x" * 2048)
    before = _open_fds()
    for ticks in range(12):
        reading = asyncio.ensure_future(read_bytes(path))
        for _ in range(ticks):
            await asyncio.sleep(0)
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading

    def all_closed() -> bool:
        gc.collect()  # a file left to the collector would be closed (and warned about) here
        return _open_fds() == before

    # The cancelled reads finish in the background (their worker threads cannot be stopped).
    await eventually(all_closed, interval=0.002, what="every cancelled read's file closed")
