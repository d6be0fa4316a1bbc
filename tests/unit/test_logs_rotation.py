"""Lumberjack-style rotation of the log file (docs/upstream.md, "Logging"): size, count, age,
gzip."""

from __future__ import annotations

import datetime
import gzip
import logging
import os
from pathlib import Path

import pytest

from multusd import logs
from multusd.config.daemon import LogOptions
from multusd.logs.rotation import RotatingFile, Rotation, backup_name, backup_time

pytestmark = pytest.mark.usefixtures("restore_logger")


def record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("multusd.x", logging.ERROR, __file__, 1, msg, (), None)


def handler_for(
    path: Path, *, max_bytes: int, max_backups: int = 5, max_age_days: float = 5, compress: bool
) -> RotatingFile:
    rotation = Rotation(max_bytes, max_backups, max_age_days, compress)
    handler = RotatingFile(path, rotation)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


def backups(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def stamp(path: Path, days_ago: float, suffix: str = "") -> Path:
    when = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=days_ago)
    name = backup_name(path, when)
    target = name.with_name(name.name + suffix)
    target.write_bytes(b"old\n")
    return target


def test_backup_name_is_lumberjacks(tmp_path: Path) -> None:
    when = datetime.datetime(2024, 3, 5, 7, 8, 9, 123456, tzinfo=datetime.UTC)
    name = backup_name(tmp_path / "multus.log", when)
    assert name.name == "multus-2024-03-05T07-08-09.123.log"
    assert backup_time(tmp_path / "multus.log", name.name) == when.replace(microsecond=123000)
    assert backup_time(tmp_path / "multus.log", name.name + ".gz") is not None
    for other in (
        "multus.log",
        "multus-x.log",
        "other-2024-03-05T07-08-09.123.log",
        "multus-2024-03-05T07-08-09.123.txt",
    ):
        assert backup_time(tmp_path / "multus.log", other) is None


def test_rotates_before_a_write_that_would_exceed_the_size(tmp_path: Path) -> None:
    path = tmp_path / "multus.log"
    handler = handler_for(path, max_bytes=25, max_backups=0, max_age_days=0, compress=False)
    for i in range(5):
        handler.handle(record(f"line {i} 123456"))  # 16 bytes with the newline
    handler.close()
    assert path.read_text() == "line 4 123456\n"
    names = backups(path)
    assert len(names) == 4
    contents = [(tmp_path / n).read_text() for n in names]
    assert contents == [f"line {i} 123456\n" for i in range(4)]  # names sort by rotation time
    assert all(len(c) <= 25 for c in contents)


def test_appends_to_an_existing_file_below_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "multus.log"
    path.write_text("earlier\n")
    handler = handler_for(path, max_bytes=100, compress=False)
    handler.handle(record("later"))
    handler.close()
    assert path.read_text() == "earlier\nlater\n"
    assert backups(path) == []


def test_rotates_an_existing_file_at_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "multus.log"
    path.write_text("x" * 20)
    os.chmod(path, 0o640)
    handler = handler_for(path, max_bytes=20, compress=False)
    handler.handle(record("new"))
    handler.close()
    assert path.read_text() == "new\n"
    assert path.stat().st_mode & 0o777 == 0o640  # the mode carries over, as lumberjack's
    [old] = backups(path)
    assert (tmp_path / old).read_text() == "x" * 20


def test_an_oversized_record_is_written_not_dropped(tmp_path: Path) -> None:
    path = tmp_path / "multus.log"
    handler = handler_for(path, max_bytes=10, compress=False)
    handler.handle(record("short"))
    handler.handle(record("much longer than ten bytes"))
    handler.close()
    assert path.read_text() == "much longer than ten bytes\n"
    assert len(backups(path)) == 1


def test_keeps_at_most_max_backups(tmp_path: Path) -> None:
    path = tmp_path / "multus.log"
    handler = handler_for(path, max_bytes=10, max_backups=2, max_age_days=0, compress=False)
    for i in range(6):
        handler.handle(record(f"line {i}"))
    handler.close()  # waits for the mill
    names = backups(path)
    assert [(tmp_path / n).read_text() for n in names] == ["line 3\n", "line 4\n"]
    assert path.read_text() == "line 5\n"


def test_removes_backups_older_than_max_age(tmp_path: Path) -> None:
    path = tmp_path / "multus.log"
    old = stamp(path, days_ago=3)
    old_gz = stamp(path, days_ago=4, suffix=".gz")
    recent = stamp(path, days_ago=1)
    unrelated = tmp_path / "notes-2000-01-01T00-00-00.000.log"
    unrelated.write_text("keep me")
    handler = handler_for(path, max_bytes=1000, max_backups=0, max_age_days=2, compress=False)
    handler.handle(record("hello"))  # opening the file runs the mill
    handler.close()
    assert not old.exists() and not old_gz.exists()
    assert recent.exists() and unrelated.exists()


def test_age_uses_the_name_not_the_mtime(tmp_path: Path) -> None:
    """Lumberjack ages backups by the timestamp in their name."""
    path = tmp_path / "multus.log"
    recent = stamp(path, days_ago=0.5)
    ancient = 10 * 86400
    os.utime(recent, (recent.stat().st_atime - ancient, recent.stat().st_mtime - ancient))
    handler = handler_for(path, max_bytes=1000, max_backups=0, max_age_days=1, compress=False)
    handler.handle(record("hello"))
    handler.close()
    assert recent.exists()


def test_compresses_backups(tmp_path: Path) -> None:
    path = tmp_path / "multus.log"
    handler = handler_for(path, max_bytes=10, max_backups=0, max_age_days=0, compress=True)
    for i in range(3):
        handler.handle(record(f"line {i}"))
    handler.close()
    names = backups(path)
    assert len(names) == 2 and all(n.endswith(".log.gz") for n in names)
    assert [gzip.decompress((tmp_path / n).read_bytes()) for n in names] == [
        b"line 0\n",
        b"line 1\n",
    ]
    assert path.read_text() == "line 2\n"


def test_plain_and_gzipped_twins_count_as_one_backup(tmp_path: Path) -> None:
    path = tmp_path / "multus.log"
    twin = stamp(path, days_ago=0.1)
    twin_gz = twin.with_name(twin.name + ".gz")
    twin_gz.write_bytes(b"")
    older = stamp(path, days_ago=0.2)
    handler = handler_for(path, max_bytes=1000, max_backups=1, max_age_days=0, compress=False)
    handler.handle(record("hello"))
    handler.close()
    assert twin.exists() and twin_gz.exists()
    assert not older.exists()


def test_rotation_from_log_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("multusd.logs.rotation.MEGABYTE", 10)
    assert Rotation.from_options(None) == Rotation(1000, 5, 5, True)
    assert Rotation.from_options(LogOptions()) == Rotation(1000, 5, 5, True)
    options = LogOptions(max_age=1, max_size=2, max_backups=0, compress=False)
    assert Rotation.from_options(options) == Rotation(20, 0, 1, False)
    assert Rotation.from_options(LogOptions(max_size=0)).max_bytes == 1000


def test_configure_rotates_in_the_writer_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("multusd.logs.rotation.MEGABYTE", 1)  # maxSize counts bytes
    path = tmp_path / "sub" / "multus.log"
    options = LogOptions(max_size=60, max_backups=2, compress=True)
    logs.configure(level="error", log_file=str(path), log_options=options)
    [handler] = logs.output_handlers()
    assert isinstance(handler, RotatingFile)
    log = logging.getLogger("multusd.test")
    for i in range(10):
        log.error("message number %d", i)
    logs.shutdown()
    names = backups(path)
    assert len(names) == 2 and all(n.endswith(".gz") for n in names)
    lines = path.read_text().splitlines()
    assert lines and lines[-1].endswith("[error] message number 9")
    assert path.stat().st_size <= 60
