"""The readiness indicator against real files, real inotify watches and real directory churn.

Intervals are shortened (50 ms polls, 0.4 s grace) so the suite stays fast; timeouts around
the awaited results are generous and only guard against hangs. A test waits for what it can
see: the watcher's inotify watch armed (``/proc``), its log lines (the file gone, the file
back), and its looks at the file (``Looks``, a count of its stats). That nothing happened
after a change that leaves no gap shows as looks made since the change, none of which saw the
file gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cni_shim.errors import INTERNAL, CNIError
from multusd.config.readiness import (
    Looks,
    ReadinessSettings,
    stat_per_request,
    wait_for_file,
    watch_until_removed,
)
from multusd.errors import EXIT_CONFIG, StartupError
from tests.waits import eventually, until_watched

GRACE = 0.4
SETTINGS = ReadinessSettings(poll_interval=0.05, startup_timeout=10.0, rotation_grace=GRACE)
HANG_GUARD = 10.0


def inotify_fds() -> int:
    """Open inotify instances of this process: each armed watcher holds exactly one."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                count += 1
        except OSError:
            continue
    return count


async def wait_inotify_at_most(limit: int) -> None:
    await eventually(lambda: inotify_fds() <= limit, HANG_GUARD)


@pytest.fixture
def watcher_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The watcher's log, read by the tests for what it saw (the file gone, the file back)."""
    caplog.set_level(logging.INFO, logger="multusd.config.readiness")
    return caplog


async def until_seen(watcher_log: pytest.LogCaptureFixture, what: str, times: int = 1) -> None:
    """Wait until the watcher has logged ``what`` ``times`` times: ``GONE`` (it saw the file
    missing and started the grace), ``BACK`` (it saw it back within the grace: a rotation)."""
    await eventually(lambda: watcher_log.text.count(what) >= times, HANG_GUARD)


GONE = "is gone; waiting"
BACK = "is back (rotated)"


def write(path: Path, text: str = "ready\n") -> None:
    path.write_text(text)


@pytest.fixture
def ready_file(tmp_path: Path) -> Path:
    directory = tmp_path / "run"
    directory.mkdir()
    path = directory / "ready"
    write(path)
    return path


@pytest.fixture
def looks() -> Looks:
    """The looks of the test's watcher at its file (the ``watcher`` fixture's among them)."""
    return Looks()


async def until_looked(looks: Looks, times: int = 1) -> None:
    """Wait until the watcher has looked at the file ``times`` times since this call (and acted
    on what it saw). One look more is awaited than asked: the first to end may have begun
    before the call, and seen the file as it was before."""
    start = looks.count
    await eventually(lambda: looks.count > start + times, HANG_GUARD, what=f"{times} looks")


async def until_looked_after_events(looks: Looks, before: int) -> None:
    """Wait until the watcher has looked at the file after a batch of events, one more than
    ``before`` (its ``after_events`` read before the test changed the directory): nothing else
    changes the directory, so that batch held the test's events (or their first part)."""
    await eventually(lambda: looks.after_events > before, HANG_GUARD, what="a batch of events")


@pytest.fixture
async def watcher(ready_file: Path, looks: Looks) -> AsyncIterator[asyncio.Task[str]]:
    """A running ``watch_until_removed`` on ``ready_file``, its watch armed."""
    task = asyncio.create_task(watch_until_removed(str(ready_file), SETTINGS, looks=looks))
    await until_watched(ready_file.parent)
    assert not task.done()
    yield task
    if not task.done():
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def assert_still_running(
    task: asyncio.Task[str], looks: Looks, watcher_log: pytest.LogCaptureFixture
) -> None:
    """After a change that shows no gap: the watcher has looked at the file since, and every
    gap it saw (none, unless it looked between two renames) it saw closed within the grace."""
    await until_looked(looks, 2)
    await until_seen(watcher_log, BACK, watcher_log.text.count(GONE))
    assert not task.done(), task.result()


async def result_of(task: asyncio.Task[str]) -> str:
    return await asyncio.wait_for(asyncio.shield(task), HANG_GUARD)


# --- start-up wait -------------------------------------------------------------------------


async def test_wait_returns_at_once_when_the_file_exists(ready_file: Path) -> None:
    await asyncio.wait_for(wait_for_file(str(ready_file), SETTINGS), HANG_GUARD)


async def test_wait_returns_when_the_file_appears_later(tmp_path: Path) -> None:
    path = tmp_path / "ready"
    waiter = asyncio.create_task(wait_for_file(str(path), SETTINGS))
    await until_watched(tmp_path)
    assert not waiter.done()
    write(path)
    await asyncio.wait_for(waiter, HANG_GUARD)


async def test_wait_returns_when_the_directory_and_file_appear_later(tmp_path: Path) -> None:
    path = tmp_path / "not-yet" / "deeper" / "ready"
    looks = Looks()
    waiter = asyncio.create_task(wait_for_file(str(path), SETTINGS, looks=looks))
    await until_looked(looks, 2)  # it polls for the directory, and has found none
    path.parent.mkdir(parents=True)
    await until_watched(path.parent)  # the directory is watched now; the file comes later
    assert not waiter.done()
    write(path)
    await asyncio.wait_for(waiter, HANG_GUARD)


async def test_wait_times_out_with_upstreams_text_and_exit_code_1(tmp_path: Path) -> None:
    path = str(tmp_path / "never")
    settings = ReadinessSettings(poll_interval=0.05, startup_timeout=0.3, rotation_grace=GRACE)
    baseline = inotify_fds()
    with pytest.raises(StartupError) as caught:
        await asyncio.wait_for(wait_for_file(path, settings), HANG_GUARD)
    assert caught.value.exit_code == EXIT_CONFIG == 1
    assert str(caught.value) == (
        "have you checked that your default network is ready? still waiting for "
        f"readinessindicatorfile @ {path}. pollimmediate error: timed out waiting for the condition"
    )
    await wait_inotify_at_most(baseline)


async def test_per_request_stat_passes_when_the_file_exists(ready_file: Path) -> None:
    await asyncio.wait_for(stat_per_request(str(ready_file), SETTINGS), HANG_GUARD)


async def test_per_request_stat_polls_until_the_file_returns(tmp_path: Path) -> None:
    """``benchmarkReadinessStat``: a request stalls while the file is missing (the seed)."""
    path = tmp_path / "ready"
    looks = Looks()
    waiter = asyncio.create_task(stat_per_request(str(path), SETTINGS, looks=looks))
    await until_looked(looks, 2)  # it stats every 50 ms, and has found no file
    assert not waiter.done()
    write(path)
    await asyncio.wait_for(waiter, HANG_GUARD)


async def test_per_request_stat_fails_the_request_with_upstreams_text(tmp_path: Path) -> None:
    path = str(tmp_path / "never")
    settings = ReadinessSettings(poll_interval=0.05, startup_timeout=0.3, rotation_grace=GRACE)
    with pytest.raises(CNIError) as caught:
        await asyncio.wait_for(stat_per_request(path, settings), HANG_GUARD)
    assert caught.value.code == INTERNAL
    assert caught.value.msg.startswith(
        f"have you checked that your default network is ready? still waiting for "
        f"readinessindicatorfile @ {path}."
    )


async def test_wait_resolves_a_relative_path_but_reports_it_raw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = ReadinessSettings(poll_interval=0.05, startup_timeout=0.2, rotation_grace=GRACE)
    with pytest.raises(StartupError, match=r"readinessindicatorfile @ \./sub/\.\./ready\. "):
        await asyncio.wait_for(wait_for_file("./sub/../ready", settings), HANG_GUARD)
    write(tmp_path / "ready")
    await asyncio.wait_for(wait_for_file("./sub/../ready", settings), HANG_GUARD)


# --- losing the file -----------------------------------------------------------------------


async def test_removal_is_reported(ready_file: Path, watcher: asyncio.Task[str]) -> None:
    ready_file.unlink()
    assert await result_of(watcher) == f"readinessindicatorfile {ready_file} was removed"


async def test_move_to_another_directory_is_reported(
    tmp_path: Path, ready_file: Path, watcher: asyncio.Task[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ready_file.rename(elsewhere / "ready")
    assert await result_of(watcher) == f"readinessindicatorfile {ready_file} was removed"


async def test_removed_directory_that_stays_gone_is_reported(
    ready_file: Path, watcher: asyncio.Task[str]
) -> None:
    shutil.rmtree(ready_file.parent)
    assert await result_of(watcher) == f"readinessindicatorfile {ready_file} was removed"


async def test_missing_at_start_is_reported_after_the_grace(ready_file: Path) -> None:
    ready_file.unlink()
    reason = await asyncio.wait_for(watch_until_removed(str(ready_file), SETTINGS), HANG_GUARD)
    assert reason == f"readinessindicatorfile {ready_file} was removed"


async def test_returning_stops_the_watcher(ready_file: Path) -> None:
    baseline = inotify_fds()
    task = asyncio.create_task(watch_until_removed(str(ready_file), SETTINGS))
    await until_watched(ready_file.parent)
    assert inotify_fds() == baseline + 1
    ready_file.unlink()
    await result_of(task)
    await wait_inotify_at_most(baseline)


# --- rotation: the file comes back within the grace ----------------------------------------


async def test_delete_and_recreate_within_the_grace_is_a_rotation(
    ready_file: Path, watcher: asyncio.Task[str], watcher_log: pytest.LogCaptureFixture
) -> None:
    for n in range(2):
        ready_file.unlink()
        await until_seen(watcher_log, GONE, n + 1)  # the gap was seen: the grace runs
        write(ready_file, f"rotated {n}\n")
        await until_seen(watcher_log, BACK, n + 1)  # and the file back within it
        assert not watcher.done(), watcher.result()
    # Still watching after the rotations: a real removal is reported.
    ready_file.unlink()
    assert await result_of(watcher) == f"readinessindicatorfile {ready_file} was removed"


async def test_atomic_replace_by_rename_over_is_a_rotation(
    ready_file: Path,
    watcher: asyncio.Task[str],
    looks: Looks,
    watcher_log: pytest.LogCaptureFixture,
) -> None:
    before = looks.after_events
    for n in range(3):
        tmp = ready_file.with_name(f".ready.{n}.tmp")
        write(tmp, f"v{n}\n")
        os.replace(tmp, ready_file)
        await asyncio.sleep(0.1)  # the writer's pace: one replace per batch of events (a model)
    await until_looked_after_events(looks, before)
    await assert_still_running(watcher, looks, watcher_log)
    assert GONE not in watcher_log.text  # a rename over the file leaves no gap to see
    ready_file.unlink()
    assert await result_of(watcher) == f"readinessindicatorfile {ready_file} was removed"


async def test_directory_recreated_with_the_file_within_the_grace_is_a_rotation(
    ready_file: Path, watcher: asyncio.Task[str], watcher_log: pytest.LogCaptureFixture
) -> None:
    shutil.rmtree(ready_file.parent)
    await until_seen(watcher_log, GONE)
    ready_file.parent.mkdir()
    write(ready_file)
    await until_seen(watcher_log, BACK)
    assert not watcher.done(), watcher.result()
    # The watch was re-armed on the new directory: removal is still seen.
    ready_file.unlink()
    assert await result_of(watcher) == f"readinessindicatorfile {ready_file} was removed"


async def test_directory_recreated_without_the_file_is_reported(
    ready_file: Path, watcher: asyncio.Task[str], watcher_log: pytest.LogCaptureFixture
) -> None:
    shutil.rmtree(ready_file.parent)
    await until_seen(watcher_log, GONE)
    ready_file.parent.mkdir()
    assert await result_of(watcher) == f"readinessindicatorfile {ready_file} was removed"


async def test_directory_swapped_by_rename_is_followed(
    tmp_path: Path,
    ready_file: Path,
    watcher: asyncio.Task[str],
    looks: Looks,
    watcher_log: pytest.LogCaptureFixture,
) -> None:
    # The file is missing only between the two renames, but the watched inode goes: the
    # watch must move along.
    staged = tmp_path / "staged"
    staged.mkdir()
    write(staged / "ready")
    ready_file.parent.rename(tmp_path / "old")
    staged.rename(ready_file.parent)
    await until_watched(ready_file.parent)  # the new directory
    await assert_still_running(watcher, looks, watcher_log)
    ready_file.unlink()
    assert await result_of(watcher) == f"readinessindicatorfile {ready_file} was removed"


async def test_polling_backend_sees_rotation_and_removal(
    ready_file: Path,
    looks: Looks,
    watcher_log: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Filesystems without inotify (some overlay/network mounts) run with watchfiles' polling
    # backend, selected by the operator through its environment variable. Rename-over then
    # shows up as "modified", removal as "deleted"; both must be judged by existence alone.
    monkeypatch.setenv("WATCHFILES_FORCE_POLLING", "1")
    monkeypatch.setenv("WATCHFILES_POLL_DELAY_MS", "50")
    # Written a while ago: the poller compares modification times in whole seconds, and a
    # replacement within the second the file was written would show as no change at all.
    os.utime(ready_file, (ready_file.stat().st_atime - 10, ready_file.stat().st_mtime - 10))
    task = asyncio.create_task(watch_until_removed(str(ready_file), SETTINGS, looks=looks))
    try:
        # Its first stat, then one after a batch: it watches, from a first snapshot of the
        # directory taken when it began to.
        await eventually(lambda: looks.count >= 2, HANG_GUARD)
        before = looks.after_events
        tmp = ready_file.with_name(".ready.tmp")
        write(tmp, "replaced\n")
        os.replace(tmp, ready_file)
        await until_looked_after_events(looks, before)  # the poll saw the file replaced
        await assert_still_running(task, looks, watcher_log)
        assert GONE not in watcher_log.text
        ready_file.unlink()
        assert await result_of(task) == f"readinessindicatorfile {ready_file} was removed"
    finally:
        task.cancel()


# --- cancellation --------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["watching", "in-grace", "directory-missing"])
async def test_cancellation_stops_everything(
    ready_file: Path, phase: str, watcher_log: pytest.LogCaptureFixture
) -> None:
    baseline = inotify_fds()
    settings = ReadinessSettings(poll_interval=0.05, startup_timeout=10.0, rotation_grace=60.0)
    task = asyncio.create_task(watch_until_removed(str(ready_file), settings))
    await until_watched(ready_file.parent)
    if phase == "in-grace":
        ready_file.unlink()
    elif phase == "directory-missing":
        shutil.rmtree(ready_file.parent)
    if phase != "watching":
        await until_seen(watcher_log, GONE)  # in the grace: watching (or polling) for the return
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, HANG_GUARD)
    await wait_inotify_at_most(baseline)
    # The suite-wide fixture then checks that no asyncio task was left behind.


async def test_cancelling_the_startup_wait_stops_everything(tmp_path: Path) -> None:
    baseline = inotify_fds()
    task = asyncio.create_task(wait_for_file(str(tmp_path / "never"), SETTINGS))
    await until_watched(tmp_path)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, HANG_GUARD)
    await wait_inotify_at_most(baseline)


# --- settings ------------------------------------------------------------------------------


def test_defaults_are_upstreams() -> None:
    settings = ReadinessSettings()
    assert (settings.poll_interval, settings.startup_timeout) == (1.0, 45.0)
    assert settings.rotation_grace == 5.0


@pytest.mark.parametrize(
    "kwargs",
    [{"poll_interval": 0.0}, {"startup_timeout": -1.0}, {"rotation_grace": -0.1}],
)
def test_nonsensical_settings_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ReadinessSettings(**kwargs)
