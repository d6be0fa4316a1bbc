"""Fake CNI plugins for the engine's tests: real executables in a per-test bin directory."""

from __future__ import annotations

import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

MakePlugin = Callable[[str, str], str]


@pytest.fixture
def bin_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="cnibin"))
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


@pytest.fixture
def make_plugin(bin_dir: Path) -> MakePlugin:
    """Write ``body`` (Python, dedented) as an executable plugin named ``name``."""

    def make(name: str, body: str) -> str:
        path = bin_dir / name
        path.write_text("#!/usr/bin/python3 -IS\n" + textwrap.dedent(body))
        path.chmod(0o755)
        return str(path)

    return make
