"""Nothing a plugin leaves behind piles up: the daemon, its plugins' subreaper, reaps every
process it adopts once it ends, and never a plugin's exit status (docs/reliability.md).

Before, a plugin that backgrounds two short ``sleep``\\ s left 40 zombies under the daemon
after 20 ADD/DEL pairs, there until the daemon exited."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import pod_env, shim_config
from tests.e2e.faults import no_traceback
from tests.e2e.harness import Daemon, run_shim, until_logged
from tests.waits import child_states, eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]

LEAVES = """#!/bin/sh
# On ADD, backgrounds two short sleeps and exits: both are reparented to the daemon.
if [ "$CNI_COMMAND" = ADD ]; then
  sleep 0.1 >/dev/null 2>&1 &
  sleep 0.1 >/dev/null 2>&1 &
  echo '{"cniVersion": "1.0.0"}'
fi
"""
PAIRS = 20


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_what_plugins_leave_behind_is_reaped_as_it_ends(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, loop: str
) -> None:
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    plugin = bin_dir / "leaves"
    plugin.write_text(LEAVES)
    plugin.chmod(0o755)
    daemon = await start_daemon(
        delegates=[{"cniVersion": "1.0.0", "name": "leaves", "type": "leaves"}],
        binDir=str(bin_dir),
        args=("--loop", loop),
    )
    namespace = await netns()
    for _ in range(PAIRS):
        env = pod_env(namespace)
        for command in ("ADD", "DEL"):
            done = await run_shim(shim_path, command, shim_config(daemon), env=env)
            assert done.returncode == 0, done  # each plugin's own exit status
    assert daemon.proc is not None
    pid = daemon.proc.pid
    # Until nothing is left under the daemon: neither a sleep still running nor a zombie.
    await eventually(lambda: not child_states(pid), 60, what="the daemon's children reaped")
    await until_logged(daemon, f"({2 * PAIRS} in all)")  # reaped by the orphan reaper
    assert "will report returncode 255" not in daemon.log()  # no plugin's status taken
    assert no_traceback(daemon.log())
