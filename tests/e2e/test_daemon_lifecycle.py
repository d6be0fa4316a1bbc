"""Start-up, socket hygiene, configuration errors and shutdown of the real daemon process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.e2e.conftest import daemon_config
from tests.e2e.harness import REPO, Daemon

StartDaemon = Callable[..., Awaitable[Daemon]]


async def _run(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "multusd",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_socket_permissions_and_removal(start_daemon: StartDaemon) -> None:
    daemon = await start_daemon()
    assert stat.S_IMODE(os.stat(daemon.socket_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(daemon.socket_path).st_mode) == 0o600
    assert await daemon.stop() == 0
    assert not os.path.exists(daemon.socket_path)


async def test_refuses_to_steal_a_live_socket(start_daemon: StartDaemon, workdir: Path) -> None:
    first = await start_daemon()
    second = Daemon(workdir / "second", dict(first.config))
    second.workdir.mkdir()
    await second.start(wait=False)
    assert second.proc is not None
    assert await asyncio.wait_for(second.proc.wait(), 30) == 3
    assert "another daemon is serving" in second.log()
    assert (await first.request("GET", "/healthz"))[0] == 200


async def test_replaces_a_stale_socket(start_daemon: StartDaemon, workdir: Path) -> None:
    run_dir = workdir / "run"
    run_dir.mkdir(mode=0o755)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(run_dir / "multus.sock"))
    stale.close()  # the file stays, nobody listens: a crashed daemon's leftover
    daemon = await start_daemon()
    assert (await daemon.request("GET", "/healthz"))[0] == 200


async def test_bad_config_exits_with_one_clear_line(workdir: Path) -> None:
    path = workdir / "bad.json"
    path.write_text(json.dumps({**daemon_config(workdir), "logToStderr": "yes"}))
    code, _out, err = await _run("--config", str(path))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "logToStderr" in lines[0], err
    code, _out, err = await _run("-config", str(workdir / "missing.json"))
    assert code == 1 and "No such file or directory" in err


async def test_version() -> None:
    code, out, _err = await _run("--version")
    assert code == 0 and out.startswith("multus-daemon: version:")


async def test_sigterm_readyz_goes_500_then_exit(start_daemon: StartDaemon) -> None:
    daemon = await start_daemon()
    assert daemon.proc is not None
    assert await daemon.stop(signal.SIGINT) == 0


async def test_probe_subcommand(start_daemon: StartDaemon, workdir: Path) -> None:
    """The DaemonSet's exec probes: ``multusd probe`` (/healthz) and ``--ready`` (/readyz)."""
    daemon = await start_daemon()
    config = workdir / "daemon-config.json"  # written by the harness
    assert (await _run("probe", "--config", str(config)))[0] == 0
    assert (await _run("probe", "--ready", "--socket-dir", daemon.socket_dir))[0] == 0
    await daemon.stop()
    code, _out, err = await _run("probe", "--ready", "--socket-dir", daemon.socket_dir)
    assert code == 1 and "multus.sock" in err
