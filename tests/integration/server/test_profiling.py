"""``enablePprof``: the profiling pages under ``/debug/`` on the metrics port, over real TCP.

The daemon's own metrics site (``daemon_parts.metrics_site``) with a real cluster (the API
emulator) for the wiring, the key and the log line; ``Metrics.serve(profiling=True)`` for each
page: what it says (a daemon task with its stack, a function that ran during a profile, the
sites that allocated), one profile at a time, the loop serving on meanwhile, the bounds.
"""

from __future__ import annotations

import asyncio
import logging
import pstats
import re
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from multusd.config.daemon import decode_daemon_config
from multusd.daemon_parts import metrics_site
from multusd.k8s.apiconfig import load_api_config
from multusd.k8s.client import ClientSettings
from multusd.k8s.cluster import running_cluster
from multusd.kubesim import KubeSim, Settings
from multusd.metrics import HEADER_TIMEOUT, SHUTDOWN_TIMEOUT, Metrics, Recorder
from multusd.server.handlers import DaemonState
from multusd.server.runner import runner_options
from tests.waits import eventually

HOST = "127.0.0.1"


async def get(port: int, path: str, method: str = "GET") -> tuple[int, str, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"http://{HOST}:{port}{path}") as response,
    ):
        return response.status, await response.text(), dict(response.headers)


def _logged_port(caplog: pytest.LogCaptureFixture, pattern: str) -> int:
    for record in caplog.records:
        found = re.fullmatch(pattern, record.getMessage())
        if found:
            return int(found.group(1))
    raise AssertionError(f"no log line {pattern!r} in {[r.getMessage() for r in caplog.records]}")


@pytest.fixture
async def site() -> AsyncIterator[int]:
    """The pages on a metrics site with the daemon's listener options (``metrics_site``'s): a
    client that leaves cancels its request."""
    options = runner_options(header_timeout=HEADER_TIMEOUT, shutdown_timeout=SHUTDOWN_TIMEOUT)
    async with Metrics(process=False).serve(0, HOST, options=options, profiling=True) as port:
        yield port


def _spin_for_the_profile() -> int:
    return sum(i * i for i in range(5_000))


async def _spinning(ticks: list[float]) -> None:
    """Work on the loop, a few ms at a time, for a profile to find."""
    while True:
        _spin_for_the_profile()
        ticks.append(time.monotonic())
        await asyncio.sleep(0.002)


# --- the key, the wiring, the log line ------------------------------------------------------------


async def test_the_daemon_serves_the_pages_with_enable_pprof(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="multusd.daemon_parts")
    config = decode_daemon_config({"metricsPort": 0, "enablePprof": True})
    failures: list[str] = []
    async with KubeSim(Settings()) as sim:
        api = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "kubeconfig")), {})
        async with (
            running_cluster(api, ClientSettings(), node_name="n1", on_failure=failures.append) as c,
            metrics_site(config, DaemonState(), c) as metrics,
        ):
            assert isinstance(metrics, Metrics)
            port = _logged_port(caplog, r"metrics on :(\d+)/metrics")
            assert _logged_port(caplog, r"pprof endpoints enabled on metrics port (\d+)") == port
            assert await c.wait_synced(30)

            status, index, _ = await get(port, "/debug/")
            assert status == 200
            for page in ("/debug/tasks", "/debug/profile", "/debug/heap"):
                assert page in index
            assert (await get(port, "/debug"))[:2] == (200, index)

            status, text, headers = await get(port, "/debug/tasks")
            assert status == 200 and headers["Content-Type"].startswith("text/plain")
            # The daemon's pod reflector, by its task's name, with the coroutines it waits in
            # down to the innermost (its watch or its list), source lines included.
            block = text.split("task 'reflector-pods' (pending): Reflector.run\n", 1)[1]
            stack = block.split("\n\n", 1)[0].splitlines()
            assert stack[0].startswith('  File "') and "multusd/k8s/" in stack[0], stack
            assert "in Reflector.run" in stack[0] and stack[1].startswith("    "), stack
            assert len([line for line in stack if line.startswith('  File "')]) >= 3, stack
            assert stack[-1].startswith("  (awaiting "), stack
            assert "task 'event-recorder'" in text
            assert re.search(r"^thread 'MainThread' \(native id \d+\)$", text, re.M)
            assert "in DebugPages.tasks" in text  # the loop's thread, answering this request

            assert (await get(port, "/metrics"))[0] == 200
    assert failures == []


async def test_off_by_default_the_pages_are_not_there(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="multusd.daemon_parts")
    for raw in ({"metricsPort": 0}, {"metricsPort": 0, "enablePprof": False}):
        caplog.clear()
        async with metrics_site(decode_daemon_config(raw), DaemonState(), None):
            port = _logged_port(caplog, r"metrics on :(\d+)/metrics")
            for path in ("/debug/", "/debug", "/debug/tasks", "/debug/profile", "/debug/heap"):
                assert (await get(port, path))[0] == 404, (raw, path)
            assert (await get(port, "/metrics"))[0] == 200
        assert not [r for r in caplog.records if "pprof" in r.getMessage()]


async def test_without_metrics_port_enable_pprof_serves_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="multusd.daemon_parts")
    config = decode_daemon_config({"enablePprof": True})
    async with metrics_site(config, DaemonState(), None) as recorder:
        assert type(recorder) is Recorder  # no site at all, as upstream
    assert [r.getMessage() for r in caplog.records] == [
        "enablePprof is set without metricsPort: no profiling endpoints"
    ]


# --- /debug/profile ----------------------------------------------------------------------------


async def test_a_profile_names_what_ran_while_the_loop_serves_on(site: int) -> None:
    ticks: list[float] = []
    spinner = asyncio.create_task(_spinning(ticks), name="spinner")
    try:
        started = time.monotonic()
        profile = asyncio.create_task(get(site, "/debug/profile?seconds=1.5&limit=40"))
        await eventually(lambda: _profiling(site), 10, what="the profile to start")
        answered = []  # the loop answers other requests during the profile
        while not profile.done():
            asked = time.monotonic()
            assert (await get(site, "/debug/"))[0] == 200
            answered.append(time.monotonic() - asked)
            await asyncio.sleep(0.1)
        status, text, headers = await profile
        took = time.monotonic() - started
    finally:
        spinner.cancel()
        await asyncio.gather(spinner, return_exceptions=True)
    assert status == 200, text
    assert headers["Content-Type"].startswith("text/plain")
    assert took >= 1.5
    assert len(answered) >= 5 and max(answered) < 0.5, answered
    assert len([t for t in ticks if started < t < started + 1.5]) >= 50  # the spinner ran too
    assert "CPU profile of the event loop thread for 1.5s" in text
    assert "Ordered by: cumulative time" in text
    rows = [line for line in text.splitlines() if re.match(r"\s+\d+(/\d+)?\s+\d+\.\d+", line)]
    assert any("(_spin_for_the_profile)" in row for row in rows), text
    assert any("(_run_once)" in row for row in rows), text  # the loop itself, on top
    assert sys.getprofile() is None  # the profiler is off again


async def _profiling(port: int) -> bool:
    """Whether a CPU profile is being taken: its request waits in the profiler's sleep."""
    return "in CpuProfiler.profile" in (await get(port, "/debug/tasks"))[1]


async def test_the_raw_profile_loads_with_pstats(site: int, tmp_path: Path) -> None:
    spinner = asyncio.create_task(_spinning([]), name="spinner")
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://{HOST}:{site}/debug/profile?seconds=0.5&format=pstats") as got,
        ):
            assert got.status == 200
            assert got.headers["Content-Type"] == "application/octet-stream"
            assert "multusd.pstats" in got.headers["Content-Disposition"]
            body = await got.read()
    finally:
        spinner.cancel()
        await asyncio.gather(spinner, return_exceptions=True)
    path = tmp_path / "multusd.pstats"
    path.write_bytes(body)
    stats = pstats.Stats(str(path))
    names = {name for (_, _, name) in stats.stats}  # type: ignore[attr-defined]
    assert "_spin_for_the_profile" in names


async def test_one_profile_at_a_time(site: int) -> None:
    first = asyncio.create_task(get(site, "/debug/profile?seconds=2"))
    await eventually(lambda: _profiling(site), 10, what="the first profile to start")
    status, text, headers = await get(site, "/debug/profile?seconds=1")
    assert status == 409
    assert text.startswith("a CPU profile is already being taken, ") and "one at a time" in text
    assert 0 <= int(headers["Retry-After"]) <= 2
    status, text, _ = await first
    assert status == 200, text
    assert (await get(site, "/debug/profile?seconds=0.1"))[0] == 200  # free again


async def test_a_client_that_leaves_ends_its_profile(site: int) -> None:
    left = asyncio.create_task(get(site, "/debug/profile?seconds=300"))
    await eventually(lambda: _profiling(site), 10, what="the profile to start")
    left.cancel()  # the connection closes: the handler is cancelled, the profiler disabled
    await asyncio.gather(left, return_exceptions=True)

    async def free() -> bool:
        return (await get(site, "/debug/profile?seconds=0.1"))[0] == 200

    await eventually(free, 10, what="the profiler to be free")
    assert sys.getprofile() is None


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("seconds=0", "seconds='0': must be greater than 0 and at most 300"),
        ("seconds=-1", "seconds='-1': must be greater than 0 and at most 300"),
        ("seconds=301", "seconds='301': must be greater than 0 and at most 300"),
        ("seconds=300.5", "seconds='300.5': must be greater than 0 and at most 300"),
        ("seconds=nan", "seconds='nan': must be greater than 0 and at most 300"),
        ("seconds=inf", "seconds='inf': must be greater than 0 and at most 300"),
        ("seconds=soon", "seconds='soon': not a number"),
        ("limit=0", "limit='0': must be from 1 to 1000"),
        ("limit=ten", "limit='ten': not an integer"),
        ("sort=name", "sort='name': must be one of cumulative, tottime, ncalls"),
        ("format=svg", "format='svg': must be one of text, pstats"),
    ],
)
async def test_a_bad_profile_query_is_refused_at_once(site: int, query: str, says: str) -> None:
    asked = time.monotonic()
    status, text, headers = await get(site, f"/debug/profile?{query}")
    assert (status, text) == (400, says + "\n")
    assert headers["Content-Type"].startswith("text/plain")
    assert time.monotonic() - asked < 5  # refused before any profile


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("limit=0", "limit='0': must be from 1 to 1000"),
        ("by=size", "by='size': must be one of lineno, traceback, filename"),
        ("frames=65", "frames='65': must be from 1 to 64"),
        ("stop=yes", "stop='yes': must be one of 0, 1"),
    ],
)
async def test_a_bad_heap_query_is_refused(site: int, query: str, says: str) -> None:
    status, text, _ = await get(site, f"/debug/heap?{query}")
    assert (status, text) == (400, says + "\n")
    assert not tracemalloc.is_tracing()  # refused before tracing started


@pytest.mark.parametrize("path", ["/debug/profile", "/debug/heap", "/debug/tasks", "/debug/"])
async def test_only_get(site: int, path: str) -> None:
    # HEAD included: a HEAD of /debug/profile would take a profile nobody reads
    for method in ("HEAD", "POST"):
        assert (await get(site, path, method))[0] == 405, method


# --- /debug/heap -------------------------------------------------------------------------------


def _allocate_for_the_heap() -> list[bytearray]:
    return [bytearray(4096) for _ in range(512)]  # 2 MiB in 512 blocks


async def test_the_heap_lists_the_largest_allocation_sites(site: int) -> None:
    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc already traces (PYTHONTRACEMALLOC?): the first request differs")
    try:
        status, text, _ = await get(site, "/debug/heap?frames=8")
        assert status == 200
        assert "tracemalloc was not tracing: started now, keeping 8 frame(s)" in text
        assert tracemalloc.is_tracing() and tracemalloc.get_traceback_limit() == 8

        held = _allocate_for_the_heap()
        status, text, _ = await get(site, "/debug/heap?limit=5")
        assert status == 200
        assert "tracing, keeping 8 frame(s) per allocation" in text
        assert re.search(r"^traced now [\d.]+ MiB, peak [\d.]+ MiB;", text, re.M), text
        assert "the 5 largest of " in text and "grouped by lineno" in text
        first = text.split("\n#1: ", 1)[1].split("\n\n", 1)[0].splitlines()
        found = re.fullmatch(r"([\d.]+) MiB in (\d+) blocks \(average [\d.]+ KiB\)", first[0])
        assert found, first
        assert float(found.group(1)) >= 2.0 and int(found.group(2)) >= 512, first
        assert first[1].startswith(f"  {__file__}:"), first
        assert first[2] == "    return [bytearray(4096) for _ in range(512)]  # 2 MiB in 512 blocks"
        assert "\n#6: " not in text

        status, text, _ = await get(site, "/debug/heap?limit=1&by=traceback&stop=1")
        assert status == 200 and "grouped by traceback" in text
        lines = text.split("\n#1: ", 1)[1].splitlines()
        assert "    held = _allocate_for_the_heap()" in lines  # the caller, a frame out
        assert text.endswith(
            "tracemalloc stopped: its traces are freed; the next request starts it again\n"
        )
        assert not tracemalloc.is_tracing()
        del held
    finally:
        tracemalloc.stop()
