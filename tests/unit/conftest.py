"""Fixtures for unit tests that touch process-wide state."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from multusd import logs


@pytest.fixture
def restore_logger() -> Iterator[None]:
    """Put the ``multusd`` logger back as it was: ``logs.configure`` rewires it for the process."""
    logger = logging.getLogger("multusd")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logs.shutdown()
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    for handler in saved[0]:
        logger.addHandler(handler)
    logger.setLevel(saved[1])
    logger.propagate = saved[2]
