"""Crash-safe writes: replace by rename, or create-only by link; no temp file is left behind."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from multusd.fsutil import atomic_write


def test_replace_writes_the_whole_file_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file"
    atomic_write(target, b"old")
    atomic_write(target, b"new", mode=0o644)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["file"]


def test_create_only_never_overwrites_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    atomic_write(target, b"first", replace=False, sync_dir=False)
    with pytest.raises(FileExistsError):
        atomic_write(target, b"second", replace=False, sync_dir=False)
    assert target.read_bytes() == b"first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
