"""Requests for one container are serialised; different containers run in parallel; a
``connectionLimit`` queues requests (they wait, they don't fail) while probes stay answered."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.e2e.conftest import pod_env, shim_config
from tests.e2e.harness import Daemon, gated_plugin, run_shim, started_runs, until_logged
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]


def _started(log: Path) -> Path:
    """Where the plugin notes each start (one line per run, at once): a test can wait for it."""
    return log.with_suffix(".started")


def _release(log: Path) -> Path:
    """The file that lets every run of the plugin end (it waits for it)."""
    return log.with_suffix(".release")


def _intervals(log: Path) -> list[tuple[str, str, float, float]]:
    return [tuple(json.loads(line)) for line in log.read_text().splitlines()]  # type: ignore[misc]


def _overlap(a: tuple[str, str, float, float], b: tuple[str, str, float, float]) -> bool:
    return a[2] < b[3] and b[2] < a[3]


async def _daemon(start_daemon: StartDaemon, workdir: Path, **extra: object) -> tuple[Daemon, Path]:
    """A daemon whose one delegate runs until the test releases it, noting each run's start
    and (in ``runs.log``, returned) its interval."""
    log = workdir / "runs.log"
    gated_plugin(workdir / "bin" / "sleeper", _started(log), _release(log), log=log)
    delegate = {"cniVersion": "1.0.0", "name": "sleepy", "type": "sleeper"}
    daemon = await start_daemon(delegates=[delegate], binDir=str(workdir / "bin"), **extra)
    return daemon, log


async def test_same_container_is_serialised(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    daemon, log = await _daemon(start_daemon, workdir)
    env = pod_env(await netns(), "same")
    # Two ADDs for one sandbox (the plugin creates nothing, so both succeed).
    runs = asyncio.gather(
        *(run_shim(shim_path, "ADD", shim_config(daemon), env=env) for _ in range(2))
    )
    # One runs; the other waits for it, as the daemon says, and has not started.
    await eventually(lambda: started_runs(_started(log)))
    await until_logged(daemon, "container same: waiting behind 1 earlier request(s)")
    assert started_runs(_started(log)) == ["same"]
    _release(log).touch()
    assert [r.returncode for r in await runs] == [0, 0]
    first, second = _intervals(log)
    assert not _overlap(first, second)


async def test_different_containers_run_in_parallel(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    daemon, log = await _daemon(start_daemon, workdir)
    envs = [pod_env(await netns(), f"c{i}") for i in range(2)]
    runs = asyncio.gather(*(run_shim(shim_path, "ADD", shim_config(daemon), env=e) for e in envs))
    # Both plugins run at once: neither ends before the release, so both started means both
    # run (serialised, the second would never start).
    await eventually(lambda: sorted(started_runs(_started(log))) == ["c0", "c1"])
    _release(log).touch()
    assert [r.returncode for r in await runs] == [0, 0]
    first, second = _intervals(log)
    assert _overlap(first, second)


async def test_connection_limit_queues_instead_of_failing(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    daemon, log = await _daemon(start_daemon, workdir, connectionLimit=1)
    envs = [pod_env(await netns(), f"q{i}") for i in range(3)]
    adds = asyncio.gather(*(run_shim(shim_path, "ADD", shim_config(daemon), env=e) for e in envs))
    # One holds the only slot, the other two wait in line for it (the daemon says so).
    await eventually(lambda: started_runs(_started(log)))
    await until_logged(daemon, "connectionLimit 1 reached: waiting for a slot (2 in line)")
    assert len(started_runs(_started(log))) == 1
    assert (await daemon.request("GET", "/readyz"))[0] == 200  # probes never queue
    _release(log).touch()
    runs = await adds
    assert [r.returncode for r in runs] == [0, 0, 0], runs
    intervals = _intervals(log)
    assert len(intervals) == 3
    assert not any(_overlap(a, b) for i, a in enumerate(intervals) for b in intervals[i + 1 :])
