"""The log queue is bounded: a stalled reader of stderr (a pipe nobody drains, as when the
runtime's log shipper stalls) never blocks the code that logs and never grows memory; records
that do not fit are dropped and counted, and one line says how many. Shutdown is bounded too."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
from collections.abc import Iterator

import pytest

from multusd import logs
from multusd.logs.writer import LOG_QUEUE_CAPACITY

pytestmark = pytest.mark.usefixtures("restore_logger")


@pytest.fixture
def stalled_pipe() -> Iterator[tuple[io.TextIOWrapper, int]]:
    """A text stream whose reader does not read (until the test drains ``read_fd``)."""
    read_fd, write_fd = os.pipe()
    stream = open(write_fd, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed below
    try:
        yield stream, read_fd
    finally:
        os.close(read_fd)  # a writer still stuck in write() now fails and its thread ends
        with contextlib.suppress(OSError):
            stream.close()


def _drain(fd: int, stop: threading.Event, out: bytearray) -> None:
    while not stop.is_set():
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        out += chunk


def test_a_stalled_reader_never_blocks_the_logger_and_drops_are_counted(
    stalled_pipe: tuple[io.TextIOWrapper, int],
) -> None:
    stream, read_fd = stalled_pipe
    logs.configure(level="debug", to_stderr=True, stream=stream)
    log = logging.getLogger("multusd.test")
    n = LOG_QUEUE_CAPACITY * 4
    filler = "x" * 200

    def emit() -> None:
        for i in range(n):
            log.info("line %d %s", i, filler)

    emitter = threading.Thread(target=emit)
    emitter.start()
    emitter.join(60)
    assert not emitter.is_alive(), "logging blocked on a stalled reader"

    (writer,) = [t for t in threading.enumerate() if t.name == "multusd-log-writer"]
    received = bytearray()
    stop = threading.Event()
    reader = threading.Thread(target=_drain, args=(read_fd, stop, received), daemon=True)
    reader.start()
    logs.shutdown()  # writes out the queue, then the last "dropped" line
    writer.join(60)  # (on a loaded machine the writer may outlive shutdown's 2 s, abandoned)
    assert not writer.is_alive()
    stream.close()  # the reader sees the end of the pipe once it has read everything
    reader.join(60)
    text = received.decode()
    lines = text.splitlines()
    written = [line for line in lines if " line " in line]
    assert 0 < len(written) < n
    summaries = [line for line in lines if "dropped" in line and "log lines" in line]
    assert summaries, lines[-3:]
    dropped = sum(int(s.split("dropped ")[1].split()[0]) for s in summaries)
    assert dropped + len(written) == n  # every line is either written or counted
    assert lines[-1] == summaries[-1]


def test_shutdown_is_bounded_when_the_writer_is_stuck(
    stalled_pipe: tuple[io.TextIOWrapper, int],
) -> None:
    stream, read_fd = stalled_pipe
    logs.configure(level="debug", to_stderr=True, stream=stream)
    log = logging.getLogger("multusd.test")
    for i in range(LOG_QUEUE_CAPACITY * 2):
        log.info("line %d %s", i, "y" * 200)
    (writer,) = [t for t in threading.enumerate() if t.name == "multusd-log-writer"]
    stopper = threading.Thread(target=logs.shutdown)
    stopper.start()
    stopper.join(60)
    assert not stopper.is_alive(), "logs.shutdown() waited forever for a stuck writer"
    assert writer.is_alive()  # abandoned, still stuck on the pipe
    # Once its output moves again, the abandoned writer drains what it holds and ends.
    stop = threading.Event()
    threading.Thread(target=_drain, args=(read_fd, stop, bytearray()), daemon=True).start()
    writer.join(60)
    stop.set()
    assert not writer.is_alive()
