"""Suite-wide guards: every test has a timeout (pyproject), warnings are errors (pyproject),
and no test may leave asyncio tasks running behind it."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio


@pytest_asyncio.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    await asyncio.sleep(0)
    leaked = [
        t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()
    ]
    for task in leaked:
        task.cancel()
    assert not leaked, f"test leaked tasks: {leaked}"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory right under /tmp: unix socket paths must fit in 108 bytes; tmp_path may not."""
    path = Path(tempfile.mkdtemp(prefix="mt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
