"""The orphan reaper: every process the daemon adopts is reaped once it ends, and no plugin's
exit status is ever taken from its child watcher (``multusd/cni/orphans.py``)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from multusd.cni.orphans import LivePlugins, Stat, Verdict, children, read_stat, verdict
from tests.waits import eventually

REPO = Path(__file__).resolve().parents[3]
SESSION = 4242  # the daemon's session, in the rule's table


@dataclass
class FakePlugin:
    pid: int
    returncode: int | None = None


async def _ready(plugin: FakePlugin) -> FakePlugin:
    return plugin


def _judge(plugins: LivePlugins, pid: int, sid: int) -> Verdict:
    return verdict(pid, Stat("Z", 1, sid), SESSION, plugins)


async def test_the_rule_never_reaps_a_plugin_its_child_watcher_has_not_reaped() -> None:
    plugins = LivePlugins()
    # In the daemon's session: a plugin before its setsid, or a child someone else waits for.
    assert _judge(plugins, 10, SESSION) is Verdict.LEAVE
    # In another session and not its leader: never a plugin (each leads its own session).
    assert _judge(plugins, 11, 7) is Verdict.ADOPTED
    # A session leader no running plugin has: an orphan that called setsid itself.
    assert _judge(plugins, 7, 7) is Verdict.ADOPTED
    plugin = await plugins.spawned(_ready(FakePlugin(7)))
    assert _judge(plugins, 7, 7) is Verdict.LEAVE  # the child watcher's to reap
    plugin.returncode = 3  # it did: the pid is no plugin's any more
    assert _judge(plugins, 7, 7) is Verdict.ADOPTED


async def test_a_session_leader_is_deferred_while_a_spawn_is_under_way() -> None:
    plugins = LivePlugins()
    settled: list[bool] = []
    plugins.on_settled = lambda: settled.append(True)
    forked = asyncio.get_running_loop().create_future()

    async def spawn() -> FakePlugin:
        # The plugin exists (and may have exited) before the spawn returns its pid.
        return FakePlugin(await forked)

    spawning = asyncio.create_task(plugins.spawned(spawn()))
    await eventually(lambda: plugins.spawning, what="the spawn under way")
    assert _judge(plugins, 9, 9) is Verdict.DEFER  # may be the plugin being spawned
    assert _judge(plugins, 8, 9) is Verdict.ADOPTED  # not a leader: never a plugin
    forked.set_result(9)
    await spawning
    assert settled == [True]
    assert not plugins.spawning
    assert _judge(plugins, 9, 9) is Verdict.LEAVE  # registered before anything else ran


async def test_the_listing_and_stat_see_a_child_and_its_state() -> None:
    proc = await asyncio.create_subprocess_exec("sleep", "60", start_new_session=True)
    try:
        assert proc.pid in (children() or [])
        stat = read_stat(proc.pid)
        assert stat is not None
        assert (stat.ppid, stat.sid) == (os.getpid(), proc.pid)
        assert stat.state in "RS"
    finally:
        proc.kill()
        await proc.wait()
    assert read_stat(proc.pid) is None


LEAVES = """#!/bin/sh
# Three children left behind, each reparented to the subreaper when the shell exits: one still
# holds the plugin's stdout (so it ends with the plugin's output), one is detached, and one
# called setsid (it leads a session, as every plugin does).
sleep 0.05 &
sleep 0.1 >/dev/null 2>&1 &
setsid sleep 0.1 >/dev/null 2>&1 &
echo '{}'
"""
OK = """#!/bin/sh
echo '{"ok": true}'
"""
FAILS = """#!/bin/sh
exit 3
"""

# A throwaway subreaper: becoming one changes the whole process, so not this one.
SUBREAPER = """
import asyncio, contextlib, json, logging, os, sys, time
from multusd.cni import invoke, orphans, reaper
from tests.waits import child_states, eventually

bin_dir, loop, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
ENV = {"PATH": "/usr/bin:/bin", "CNI_COMMAND": "ADD"}
warnings = []


class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())


async def run(name):
    executor = invoke.SubprocessExecutor()
    try:
        out = await executor.execute(f"{bin_dir}/{name}", b"{}", ENV, timeout=60)
        return out.decode()
    except invoke.CNIError as exc:
        return exc.msg


async def main():
    logging.getLogger("asyncio").addHandler(Keep(logging.WARNING))
    assert reaper.adopt_orphans()
    if loop == "pidfd":  # the daemon's watcher on 3.11 (multusd.daemon)
        from multusd.daemon import use_pidfd_child_watcher
        use_pidfd_child_watcher(asyncio.get_running_loop())
    reaping = orphans.OrphanReaper(settle=0)  # a sweep at every end: the most chances to race
    task = asyncio.create_task(reaping.run())

    async def race():
        # Holds the loop a little, then sweeps before anything else runs: plugins that
        # exited meanwhile are zombies their child watcher (on the loop, pidfd or uvloop)
        # has not reaped yet, the very moment at which a wrong rule would take them.
        while True:
            time.sleep(0.002)
            reaping.sweep()
            await asyncio.sleep(0)

    racing = asyncio.create_task(race())
    async with asyncio.timeout(120):
        names = ["leaves", "ok", "fails"] * rounds
        outcomes = await asyncio.gather(*(run(name) for name in names))
    racing.cancel()
    async with asyncio.timeout(120):
        await eventually(
            lambda: reaping.reaped >= 3 * rounds and not child_states(),
            60,
            what="every adopted process reaped",
        )
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    pidfds = sum(
        1 for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
        and os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[pidfd]"
    )
    print(json.dumps({
        "outcomes": sorted(set(zip(names, outcomes))),
        "reaped": reaping.reaped,
        "children": child_states(),
        "pidfds": pidfds,
        "warnings": warnings,
    }))


if loop == "uvloop":
    import uvloop
    runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
else:
    runner = asyncio.Runner()
with runner:
    runner.run(main())
"""


def _plugin(directory: Path, name: str, text: str) -> None:
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)


@pytest.mark.parametrize("loop", ["threaded", "pidfd", "uvloop"])
async def test_adopted_orphans_are_reaped_and_plugins_keep_their_exit_status(
    bin_dir: Path, loop: str
) -> None:
    for name, text in (("leaves", LEAVES), ("ok", OK), ("fails", FAILS)):
        _plugin(bin_dir, name, text)
    rounds = 30
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SUBREAPER, str(bin_dir), loop, str(rounds),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()
    seen = json.loads(out)
    # Each plugin's own status, every time: 0 and 3, never 255 (or, with uvloop, a hang).
    assert seen["outcomes"] == [
        ["fails", "netplugin failed with no error message: exit status 3"],
        ["leaves", "{}\n"],
        ["ok", '{"ok": true}\n'],
    ]
    assert seen["warnings"] == []  # asyncio's "will report returncode 255"
    assert seen["reaped"] >= 3 * rounds
    assert seen["children"] == {}  # no zombie, nothing left running
    assert seen["pidfds"] == 0  # the reaper's watches closed when it was cancelled
