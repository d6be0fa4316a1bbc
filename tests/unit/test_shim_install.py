"""``shim_install`` parses the shim's sources even while finalisers format tracebacks."""

from __future__ import annotations

import gc
import traceback
from pathlib import Path

from multusd import shim_install

SOURCE = (Path(shim_install.__file__).parents[1] / "cni_shim" / "shim.py").read_bytes()


class _FormatsATraceback:
    """Cyclic garbage whose finaliser formats a traceback, as asyncio's "Future exception was
    never retrieved" does: on CPython 3.11.2 that nests an ``ast.parse`` into any conversion
    the collector interrupts (gh-106905)."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        try:
            raise ValueError("boom")
        except ValueError:
            traceback.format_exc()


def test_parse_survives_finalisers_that_format_tracebacks() -> None:
    threshold = gc.get_threshold()
    gc.set_threshold(50)
    try:
        for _ in range(30):
            for _ in range(200):
                _FormatsATraceback()
            shim_install.parse_source(SOURCE)
    finally:
        gc.set_threshold(*threshold)
        gc.collect()
    assert gc.isenabled()
