"""Upstream's log shape: ``<RFC3339> [<level>] <message>`` and its four levels
(docs/upstream.md, "Logging")."""

from __future__ import annotations

import io
import logging
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from multusd import logs
from multusd.logs.format import LEVELS, MultusFormatter, parse_level, request_id
from multusd.logs.rotation import RotatingFile

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d) \[(\w+)\] (.*)$")


pytestmark = pytest.mark.usefixtures("restore_logger")


@pytest.fixture
def timezone(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch
    monkeypatch.undo()
    time.tzset()


def record(level: int, msg: str = "hello %s", created: float = 0.0) -> logging.LogRecord:
    args = ("world",) if "%s" in msg else ()
    rec = logging.LogRecord("multusd.x", level, __file__, 1, msg, args, None)
    rec.created = created
    return rec


@pytest.mark.parametrize(
    ("tz", "stamp"),
    [
        ("UTC", "1970-01-01T00:00:00Z"),
        ("XXX-02", "1970-01-01T02:00:00+02:00"),
        ("XXX+05:30", "1969-12-31T18:30:00-05:30"),
    ],
)
def test_rfc3339_in_local_zone(timezone: pytest.MonkeyPatch, tz: str, stamp: str) -> None:
    timezone.setenv("TZ", tz)
    time.tzset()
    line = MultusFormatter().format(record(logging.ERROR))
    assert line == f"{stamp} [error] hello world"


@pytest.mark.parametrize(
    ("level", "name"),
    [
        (logging.CRITICAL, "panic"),
        (logging.ERROR, "error"),
        (logging.WARNING, "error"),
        (logging.INFO, "verbose"),
        (logging.DEBUG, "debug"),
        (5, "verbose"),
    ],
)
def test_level_names(level: int, name: str) -> None:
    line = MultusFormatter().format(record(level, "m"))
    match = LINE.match(line)
    assert match is not None
    assert match.group(2, 3) == (name, "m")


def test_exception_appended() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        rec = logging.LogRecord("multusd", logging.ERROR, __file__, 1, "failed", (), None)
        rec.exc_info = sys.exc_info()
    text = MultusFormatter().format(rec)
    first, *rest = text.splitlines()
    assert first.endswith(" [error] failed")
    assert rest[-1] == "RuntimeError: boom"


def test_parse_level() -> None:
    assert [parse_level(n) for n in ("panic", "ERROR", "Verbose", "debug")] == [
        logging.CRITICAL,
        logging.ERROR,
        logging.INFO,
        logging.DEBUG,
    ]
    assert parse_level("") is None
    assert parse_level("trace") is None
    # Upstream's numeric order: panic < error < verbose < debug (more is chattier).
    ordered = [LEVELS[n] for n in ("panic", "error", "verbose", "debug")]
    assert ordered == sorted(ordered, reverse=True)


def emit_all() -> None:
    log = logging.getLogger("multusd.test")
    log.critical("p")
    log.error("e")
    log.info("v")
    log.debug("d")


@pytest.mark.parametrize(
    ("level", "seen"),
    [("", "p"), ("panic", "p"), ("error", "pe"), ("verbose", "pev"), ("DEBUG", "pevd")],
)
def test_configured_level_filters(level: str, seen: str) -> None:
    stream = io.StringIO()
    logs.configure(level=level, to_stderr=True, stream=stream)
    emit_all()
    logs.shutdown()
    matches = [LINE.match(line) for line in stream.getvalue().splitlines()]
    messages = [m.group(3) for m in matches if m is not None]
    assert len(messages) == len(matches)
    assert "".join(messages) == seen


def test_unknown_level_reported(capsys: pytest.CaptureFixture[str]) -> None:
    stream = io.StringIO()
    logs.configure(level="loud", to_stderr=True, stream=stream)
    assert capsys.readouterr().err == "multus logging: cannot set logging level to loud\n"
    emit_all()
    logs.shutdown()
    assert stream.getvalue().count("\n") == 1


def test_file_handler_and_stderr_together(tmp_path: Path) -> None:
    path = tmp_path / "multus.log"
    stream = io.StringIO()
    logs.configure(level="error", to_stderr=True, log_file=str(path), stream=stream)
    assert not path.exists()  # opened lazily
    logging.getLogger("multusd.x").error("to both %d", 1)
    logs.shutdown()
    file_lines = path.read_text().splitlines()
    assert len(file_lines) == 1
    assert file_lines[0].endswith(" [error] to both 1")
    assert stream.getvalue().splitlines() == file_lines


def test_reconfigure_replaces_handlers(tmp_path: Path) -> None:
    first = io.StringIO()
    logs.configure(level="error", to_stderr=True, stream=first)
    logs.configure(level="error", log_file=str(tmp_path / "l.log"))
    logging.getLogger("multusd").error("only in file")
    handlers = logs.output_handlers()
    logs.shutdown()
    assert first.getvalue() == ""
    assert len(handlers) == 1 and isinstance(handlers[0], RotatingFile)
    assert logging.getLogger("multusd").propagate is False


def test_no_output_configured_is_silent() -> None:
    logs.configure(level="debug")
    handlers = logging.getLogger("multusd").handlers
    assert len(handlers) == 1 and isinstance(handlers[0], logging.NullHandler)


def test_request_id_is_carried_by_the_context() -> None:
    stream = io.StringIO()
    logs.configure(level="debug", to_stderr=True, stream=stream)
    token = request_id.set("r000042")
    try:
        logging.getLogger("multusd.x").info("inside")
    finally:
        request_id.reset(token)
    logging.getLogger("multusd.x").info("outside")
    logs.shutdown()
    inside, outside = stream.getvalue().splitlines()
    assert inside.endswith("[verbose] [r000042] inside")
    assert outside.endswith("[verbose] outside")
