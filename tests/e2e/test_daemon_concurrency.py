"""Requests for one container are serialised; different containers run in parallel; a
``connectionLimit`` queues requests (they wait, they don't fail) while probes stay answered."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.e2e.conftest import pod_env, shim_config
from tests.e2e.harness import Daemon, run_shim
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
SLEEP = 0.6


def _started(log: Path) -> Path:
    """Where the plugin notes each start (one line per run, at once): a test can wait for it."""
    return log.with_suffix(".started")


def _sleeper(bin_dir: Path, log: Path) -> None:
    """A plugin that records when it ran (start, end) and returns an empty 1.0.0 result."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "sleeper"
    path.write_text(
        "#!/usr/bin/python3 -IS\nimport os, time, json\n"
        "start = time.time()\n"
        f"with open({str(_started(log))!r}, 'a') as f:\n"
        "    f.write(os.environ['CNI_CONTAINERID'] + '\\n')\n"
        f"time.sleep({SLEEP})\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps([os.environ['CNI_COMMAND'], os.environ['CNI_CONTAINERID'],"
        " start, time.time()]) + '\\n')\n"
        "print(json.dumps({'cniVersion': '1.0.0'}))\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _intervals(log: Path) -> list[tuple[str, str, float, float]]:
    return [tuple(json.loads(line)) for line in log.read_text().splitlines()]  # type: ignore[misc]


def _overlap(a: tuple[str, str, float, float], b: tuple[str, str, float, float]) -> bool:
    return a[2] < b[3] and b[2] < a[3]


async def _daemon(start_daemon: StartDaemon, workdir: Path, **extra: object) -> tuple[Daemon, Path]:
    log = workdir / "runs.log"
    _sleeper(workdir / "bin", log)
    delegate = {"cniVersion": "1.0.0", "name": "sleepy", "type": "sleeper"}
    daemon = await start_daemon(delegates=[delegate], binDir=str(workdir / "bin"), **extra)
    return daemon, log


async def test_same_container_is_serialised(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    daemon, log = await _daemon(start_daemon, workdir)
    env = pod_env(await netns(), "same")
    # Two ADDs for one sandbox (the plugin creates nothing, so both succeed).
    runs = await asyncio.gather(
        *(run_shim(shim_path, "ADD", shim_config(daemon), env=env) for _ in range(2))
    )
    assert [r.returncode for r in runs] == [0, 0], runs
    first, second = _intervals(log)
    assert not _overlap(first, second)


async def test_different_containers_run_in_parallel(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    daemon, log = await _daemon(start_daemon, workdir)
    envs = [pod_env(await netns(), f"c{i}") for i in range(2)]
    runs = await asyncio.gather(
        *(run_shim(shim_path, "ADD", shim_config(daemon), env=e) for e in envs)
    )
    assert [r.returncode for r in runs] == [0, 0], runs
    first, second = _intervals(log)
    assert _overlap(first, second)


async def test_connection_limit_queues_instead_of_failing(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    daemon, log = await _daemon(start_daemon, workdir, connectionLimit=1)
    envs = [pod_env(await netns(), f"q{i}") for i in range(3)]
    adds = asyncio.gather(*(run_shim(shim_path, "ADD", shim_config(daemon), env=e) for e in envs))
    await eventually(_started(log).exists)  # one holds the only slot, the others queue
    assert (await daemon.request("GET", "/readyz"))[0] == 200  # probes never queue
    runs = await adds
    assert [r.returncode for r in runs] == [0, 0, 0], runs
    intervals = _intervals(log)
    assert len(intervals) == 3
    assert not any(_overlap(a, b) for i, a in enumerate(intervals) for b in intervals[i + 1 :])
