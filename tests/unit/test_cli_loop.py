"""``multusd --loop``: which event loop the daemon runs on."""

from __future__ import annotations

import asyncio
import sys

import pytest

from multusd.cli import loop_factory
from multusd.errors import StartupError


def test_asyncio_is_the_default_and_needs_no_factory() -> None:
    assert loop_factory("asyncio") is None


def test_uvloop_and_auto_use_uvloop_when_it_is_installed() -> None:
    import uvloop  # installed by the test extra

    for name in ("uvloop", "auto"):
        factory = loop_factory(name)
        assert factory is not None
        loop = factory()
        try:
            assert isinstance(loop, uvloop.Loop)
            assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
        finally:
            loop.close()


def test_without_uvloop_auto_falls_back_and_uvloop_is_a_start_up_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert loop_factory("auto") is None
    with pytest.raises(StartupError, match="uvloop is not installed"):
        loop_factory("uvloop")
