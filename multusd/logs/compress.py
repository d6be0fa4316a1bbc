"""Compressing a rotated log file, as lumberjack does: ``x`` becomes ``x.gz``.

Run by the rotation's mill thread, never by the writer: a 100 MB compression must not hold up
log lines. The file is written under a temp name first, so a crash mid-way never leaves a
truncated ``.gz`` that counts as a backup.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
from pathlib import Path

GZ = ".gz"
"""The suffix of a compressed backup (lumberjack's ``compressSuffix``)."""


def gzip_file(path: Path) -> None:
    """``x`` -> ``x.gz`` via a temp name (which no backup pattern matches), then drop ``x``."""
    target = path.with_name(path.name + GZ)
    temp = path.with_name(path.name + GZ + ".tmp")
    mode = path.stat().st_mode & 0o7777
    try:
        with open(path, "rb") as src, open(temp, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", filename="") as out:
                shutil.copyfileobj(src, out, 1024 * 1024)
            raw.flush()
            os.fchmod(raw.fileno(), mode)
            os.fsync(raw.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    path.unlink()
