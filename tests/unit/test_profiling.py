"""``multusd.profiling`` on its own: the query rules, the stacks of tasks, one CPU profile at a
time, the ``enablePprof`` key, and the numbers docs/operations.md states."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from multusd import profiling
from multusd.config.daemon import decode_daemon_config
from multusd.errors import ConfigError

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.mark.parametrize(
    ("raw", "enabled"),
    [({}, False), ({"enablePprof": True}, True), ({"enablePprof": False}, False),
     ({"enablePprof": None}, False), ({"ENABLEPPROF": True}, True)],
)  # fmt: skip
def test_enable_pprof_is_upstreams_pointer_to_bool(raw: dict[str, object], enabled: bool) -> None:
    assert decode_daemon_config(raw).enable_pprof is enabled  # null: Go's nil pointer, unset


@pytest.mark.parametrize(
    ("value", "got"), [("true", 'a string ("true")'), (1, "a number (1)"), ({}, "an object")]
)
def test_enable_pprof_takes_a_json_boolean_only(value: object, got: str) -> None:
    with pytest.raises(ConfigError) as error:
        decode_daemon_config({"enablePprof": value})
    assert str(error.value) == f"daemon config: key 'enablePprof': expected a boolean, got {got}"


def test_query_numbers() -> None:
    assert profiling.number({}, "seconds", 30.0, 300.0) == 30.0
    assert profiling.number({"seconds": "0.25"}, "seconds", 30.0, 300.0) == 0.25
    assert profiling.number({"seconds": "300"}, "seconds", 30.0, 300.0) == 300.0
    assert profiling.integer({"limit": "7"}, "limit", 25, 1000) == 7
    assert profiling.choice({}, "by", profiling.HEAP_GROUPS) == "lineno"
    for bad in ("0", "-0.1", "300.01", "nan", "inf", "1e9", "", "thirty"):
        with pytest.raises(profiling.BadQuery, match=r"^seconds='"):
            profiling.number({"seconds": bad}, "seconds", 30.0, 300.0)
    for bad in ("0", "1001", "1.5", "x"):
        with pytest.raises(profiling.BadQuery, match=r"^limit='"):
            profiling.integer({"limit": bad}, "limit", 25, 1000)


async def _inner(event: asyncio.Event) -> None:
    await event.wait()


async def _outer(event: asyncio.Event) -> None:
    await _inner(event)


async def _stream() -> AsyncIterator[int]:
    await asyncio.Event().wait()
    yield 1


async def _consume() -> None:
    async for _ in _stream():
        pass


async def _await_task(task: asyncio.Task[None]) -> None:
    await task


async def test_a_task_shows_the_coroutines_it_waits_in() -> None:
    event = asyncio.Event()
    outer = asyncio.create_task(_outer(event), name="t-outer")
    stream = asyncio.create_task(_consume(), name="t-stream")
    waiter = asyncio.create_task(_await_task(outer), name="t-waiter")
    await asyncio.sleep(0)
    try:
        stacks = {s.title: s for s in profiling.capture_tasks(asyncio.get_running_loop())}
        text = await asyncio.to_thread(profiling.render_stacks, list(stacks.values()), [])
    finally:
        event.set()
        stream.cancel()
        await asyncio.gather(outer, stream, waiter, return_exceptions=True)

    names = [name for (_, _, name) in stacks["task 't-outer' (pending): _outer"].frames]
    assert names == ["_outer", "_inner", "Event.wait"]
    assert stacks["task 't-outer' (pending): _outer"].note == "awaiting a future"
    # through an async generator's step, which has no frame of its own
    names = [name for (_, _, name) in stacks["task 't-stream' (pending): _consume"].frames]
    assert names == ["_consume", "_stream", "Event.wait"]
    assert stacks["task 't-waiter' (pending): _await_task"].note == "awaiting task 't-outer'"
    assert "    await _inner(event)\n" in text  # source lines, read in the thread
    assert re.search(r"^task '[^']+' \(pending\): .*\n  \(running: this request", text, re.M)


async def test_one_cpu_profile_at_a_time_and_a_cancelled_one_frees_the_profiler() -> None:
    cpu = profiling.CpuProfiler()
    first = asyncio.create_task(cpu.profile(60))
    await asyncio.sleep(0)
    with pytest.raises(profiling.ProfilerBusy) as busy:
        await cpu.profile(1)
    assert 59 <= busy.value.retry_after <= 60
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert sys.getprofile() is None
    text = profiling.render_profile(await cpu.profile(0.01), seconds=0.01, limit=5)
    assert "CPU profile of the event loop thread for 0.01s" in text


@pytest.mark.parametrize(
    ("sentence", "value"),
    [
        (r"seconds \(default (\d+), at most \d+;", profiling.DEFAULT_PROFILE_SECONDS),
        (r"seconds \(default \d+, at most (\d+);", profiling.MAX_PROFILE_SECONDS),
        (r"`limit=` rows \((\d+), at most", profiling.DEFAULT_PROFILE_LIMIT),
        (r"`limit=` rows \(\d+, at most ([\d,]+)\)", profiling.MAX_LIMIT),
        (r"`limit=` sites \((\d+), at most", profiling.DEFAULT_HEAP_LIMIT),
        (r"`limit=` sites \(\d+, at most ([\d,]+)\)", profiling.MAX_LIMIT),
        (r"`frames=N` \(1, at most (\d+)\)", profiling.MAX_FRAMES),
        (r"a CPU profile of up to (\d+) minutes", profiling.MAX_PROFILE_SECONDS / 60),
    ],
)
def test_the_numbers_operations_md_states(sentence: str, value: float) -> None:
    text = " ".join(OPERATIONS.read_text(encoding="utf-8").split())
    found = re.search(sentence, text)
    assert found, sentence
    assert float(found.group(1).replace(",", "")) == value
