"""``server.runner``: aiohttp's protocol errors in one line; the options every listener shares."""

from __future__ import annotations

import logging

import pytest

from multusd.server.runner import MIN_SHUTDOWN_TIMEOUT, OneLineLogger, runner_options


@pytest.fixture
def logger(caplog: pytest.LogCaptureFixture) -> OneLineLogger:
    caplog.set_level(logging.DEBUG, logger="test.oneline")
    return OneLineLogger(logging.getLogger("test.oneline"), {})


def test_an_exception_is_one_warning_line_with_its_reason(
    logger: OneLineLogger, caplog: pytest.LogCaptureFixture
) -> None:
    try:
        raise ValueError("400, message:\n  Invalid method\n    ^")
    except ValueError:
        logger.exception("Error handling request from %s", "peer")
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage() == (
        "Error handling request from peer: ValueError: 400, message: Invalid method ^"
    )


def test_an_exception_given_to_debug_stays_a_debug_line(
    logger: OneLineLogger, caplog: pytest.LogCaptureFixture
) -> None:
    logger.debug("Error handling request from %s", None, exc_info=OSError("gone"))
    logger.info("plain %d", 1)
    debug, info = caplog.records
    assert (debug.levelno, debug.exc_info) == (logging.DEBUG, None)
    assert debug.getMessage() == "Error handling request from None: OSError: gone"
    assert (info.levelno, info.getMessage()) == (logging.INFO, "plain 1")


def test_the_options_never_ask_aiohttp_to_wait_for_ever() -> None:
    options = runner_options(header_timeout=3, shutdown_timeout=0)
    assert options["shutdown_timeout"] == MIN_SHUTDOWN_TIMEOUT  # aiohttp reads 0 as no limit
    assert options["keepalive_timeout"] == 3 and options["handler_cancellation"] is True
    assert options["auto_decompress"] is False and options["access_log"] is None
