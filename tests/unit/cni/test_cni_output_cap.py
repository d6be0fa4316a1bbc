"""The executor's bounds on a plugin's output (``multusd.cni.output``): stdout past its cap gets
the plugin's process group killed and reaped and the call failed; stderr is drained to its end
and only its tail kept. The plugins are real executables in a temp dir; ``/proc`` says what is
left of them."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cni_shim.errors import CNIError
from multusd.cni import invoke
from multusd.cni.invoke import SubprocessExecutor
from multusd.cni.output import MAX_STDOUT, STDERR_TAIL, MiB
from tests.waits import eventually, group_members

MakePlugin = Callable[[str, str], str]  # the conftest fixture

ENV = {"PATH": "/usr/bin:/bin"}


def _flooder(bin_dir: Path, name: str, size: int | None, *, ignore_term: bool = False) -> Path:
    """A shell plugin that starts a ``sleep`` child in its group, notes both pids, prints
    ``size`` bytes on stdout (``None``: without end) and then waits for the child: only a kill
    ends it. ``ignore_term``: the whole group ignores SIGTERM."""
    path = bin_dir / name
    trap = "trap '' TERM\n" if ignore_term else ""
    flood = "cat /dev/zero" if size is None else f"head -c {size} /dev/zero"
    path.write_text(f'#!/bin/sh\n{trap}sleep 1000 &\necho "$$ $!" > "{path}.pids"\n{flood}\nwait\n')
    path.chmod(0o755)
    return path


async def _pids(path: Path) -> tuple[int, int]:
    pids = Path(f"{path}.pids")
    await eventually(lambda: pids.exists() and pids.read_text().strip() != "", 10)
    leader, child = pids.read_text().split()
    return int(leader), int(child)


@pytest.mark.parametrize(
    ("size", "ignore_term"),
    [(2 * MiB, False), (None, True)],
    ids=["2MiB-obeys-sigterm", "endless-ignores-sigterm"],
)
async def test_a_plugin_past_the_stdout_cap_is_killed_with_its_group(
    bin_dir: Path, size: int | None, ignore_term: bool
) -> None:
    """Past the cap on stdout, the call fails at once (not at its timeout), naming the plugin
    and the cap, and nothing of the plugin's group runs any more. A plugin that ignores SIGTERM
    goes on writing through the grace period: its pipe is still drained, and SIGKILL ends it
    (with the pipe left full, the reaping waited forever)."""
    path = _flooder(bin_dir, "flood", size, ignore_term=ignore_term)
    executor = SubprocessExecutor(kill_grace=0.2)
    with pytest.raises(CNIError) as info:
        async with asyncio.timeout(60):  # only keeps a broken test from hanging
            await executor.execute(str(path), b"{}", ENV, timeout=600)
    assert info.value.code == invoke.OUTPUT_CODE == 999
    assert info.value.msg == (
        f"netplugin {path} printed more than {MAX_STDOUT} bytes on stdout (the most the daemon "
        "reads of a plugin's result) and was killed"
    )
    leader, child = await _pids(path)
    assert not Path(f"/proc/{leader}").exists(), "the plugin itself is reaped"
    assert group_members(leader, zombies=False) == [], f"left of the group: {child}"


async def test_stdout_up_to_the_cap_is_returned_whole_and_one_byte_more_is_refused(
    make_plugin: MakePlugin,
) -> None:
    path = make_plugin(
        "exact", "import os, sys\nsys.stdout.buffer.write(b'a' * int(os.environ['SIZE']))\n"
    )
    out = await SubprocessExecutor().execute(
        path, b"{}", {**ENV, "SIZE": str(MAX_STDOUT)}, timeout=60
    )
    assert out == b"a" * MAX_STDOUT
    with pytest.raises(CNIError) as info:
        await SubprocessExecutor().execute(
            path, b"{}", {**ENV, "SIZE": str(MAX_STDOUT + 1)}, timeout=60
        )
    assert info.value.code == invoke.OUTPUT_CODE


STDERR_FLOOD = """
import sys
sys.stderr.buffer.write(b"x" * (2 * 1024 * 1024) + b" the end of the log")
sys.stderr.flush()
sys.stdout.write('{"cniVersion": "1.0.0", "dns": {}}')
sys.exit(int(sys.argv[0].endswith("fail")))
"""


async def test_a_plugin_flooding_stderr_succeeds_with_its_tail_kept(
    make_plugin: MakePlugin, caplog: pytest.LogCaptureFixture
) -> None:
    """2 MiB on stderr *before* its result: read concurrently, or the plugin would block on
    the full pipe and never print it. The result comes back; the log keeps the last 64 KiB."""
    path = make_plugin("chatty", STDERR_FLOOD)
    with caplog.at_level(logging.DEBUG, logger="multusd.cni.invoke"):
        out = await SubprocessExecutor().execute(path, b"{}", ENV, timeout=60)
    assert out == b'{"cniVersion": "1.0.0", "dns": {}}'
    (record,) = [r for r in caplog.records if "stderr" in r.getMessage()]
    message = record.getMessage()
    assert record.levelno == logging.DEBUG
    assert message.endswith("x the end of the log")
    total = 2 * MiB + len(" the end of the log")
    assert f"(stderr: its last {STDERR_TAIL} of {total} bytes)" in message
    assert len(message) < STDERR_TAIL + 1024


async def test_a_failing_plugin_with_a_long_stderr_quotes_its_end(
    make_plugin: MakePlugin,
) -> None:
    """No stdout, so libcni's message quotes stderr: its end, said to be only that."""
    path = make_plugin("chatty-fail", STDERR_FLOOD.replace("sys.stdout.write", "str"))
    with pytest.raises(CNIError) as info:
        await SubprocessExecutor().execute(path, b"{}", ENV, timeout=60)
    assert info.value.msg.startswith('netplugin failed: "xxx')
    assert info.value.msg.endswith('x the end of the log"')
    assert len(info.value.msg) == len('netplugin failed: ""') + STDERR_TAIL
    total = 2 * MiB + len(" the end of the log")
    assert info.value.details == f"stderr: its last {STDERR_TAIL} of {total} bytes"


async def test_cancelling_a_plugin_that_floods_stderr_kills_and_reaps_it(bin_dir: Path) -> None:
    path = bin_dir / "noisy"
    path.write_text(f'#!/bin/sh\necho "$$" > "{path}.pid"\nwhile :; do echo noise >&2; done\n')
    path.chmod(0o755)
    task = asyncio.create_task(
        SubprocessExecutor(kill_grace=0.2).execute(str(path), b"{}", ENV, timeout=None)
    )
    pid_file = Path(f"{path}.pid")
    await eventually(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists()
    assert group_members(pid, zombies=False) == []


async def test_no_descriptor_or_task_is_left_behind(bin_dir: Path, make_plugin: MakePlugin) -> None:
    """Runs that end every way (a result, a failure, the cap, a timeout) leave the daemon's
    descriptors and tasks as they were."""
    ok = make_plugin("ok", 'print("{}")\n')
    failing = make_plugin("failing", 'import sys\nsys.stderr.write("no")\nsys.exit(1)\n')
    flood = _flooder(bin_dir, "flood", 2 * MiB)
    hang = make_plugin("hang", "import time\ntime.sleep(1000)\n")
    executor = SubprocessExecutor(kill_grace=0.2)

    async def every_way() -> None:
        assert await executor.execute(ok, b"{}", ENV, timeout=60) == b"{}\n"
        for path, timeout in ((failing, 60.0), (str(flood), 60.0), (hang, 0.5)):
            with pytest.raises(CNIError):
                await executor.execute(path, b"{}", ENV, timeout=timeout)

    await every_way()  # whatever asyncio opens once, on its first subprocess
    fds = sorted(os.listdir("/proc/self/fd"))
    tasks = asyncio.all_tasks()
    await every_way()
    assert sorted(os.listdir("/proc/self/fd")) == fds
    assert asyncio.all_tasks() == tasks
