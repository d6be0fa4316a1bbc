"""Real components for end-to-end tests: the daemon as a subprocess, the installed shim,
network namespaces, and a raw HTTP client for the unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.waits import eventually

PLUGIN_DIR = "/usr/lib/cni"
REPO = Path(__file__).resolve().parents[2]


def short_id() -> str:
    return uuid.uuid4().hex[:8]


async def until_logged(daemon: Daemon, what: str | re.Pattern[str], timeout: float = 30) -> None:
    """Wait (bounded) until the daemon's log contains ``what`` (a string, or a pattern searched
    for): the log is how a test sees a stage the daemon reaches with no other sign outside."""
    if isinstance(what, str):
        await eventually(lambda: what in daemon.log(), timeout)
    else:
        await eventually(lambda: what.search(daemon.log()) is not None, timeout)


def gated_plugin(path: Path, started: Path, release: Path, *, log: Path | None = None) -> None:
    """Write a CNI plugin at ``path`` whose ADD notes it runs (appends its container ID to
    ``started``), waits until the test creates ``release``, and returns an empty 1.0.0 result;
    with ``log``, it then appends ``[command, container, start, end]`` (wall clock) there.
    Every other command returns at once (a DEL must not wait behind the ADD's gate).

    A slow plugin whose end the test chooses: one that sleeps for a while is still running only
    as long as the test keeps up, which a loaded machine does not promise. It gives up waiting
    after two minutes, so a test that failed before releasing it leaves nothing running."""
    path.parent.mkdir(parents=True, exist_ok=True)
    script = (
        "#!/usr/bin/python3 -IS\nimport json, os, time\n"
        "start = time.time()\n"
        "if os.environ['CNI_COMMAND'] == 'ADD':\n"
        f"    with open({str(started)!r}, 'a') as f:\n"
        "        f.write(os.environ['CNI_CONTAINERID'] + '\\n')\n"
        f"    while not os.path.exists({str(release)!r}) and time.time() < start + 120:\n"
        "        time.sleep(0.01)\n"
    )
    if log is not None:
        script += (
            f"with open({str(log)!r}, 'a') as f:\n"
            "    f.write(json.dumps([os.environ['CNI_COMMAND'], os.environ['CNI_CONTAINERID'],"
            " start, time.time()]) + '\\n')\n"
        )
    path.write_text(script + "print(json.dumps({'cniVersion': '1.0.0'}))\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def started_runs(started: Path) -> list[str]:
    """The container IDs a :func:`gated_plugin` has noted, one per run begun."""
    return started.read_text().splitlines() if started.exists() else []


@dataclass
class ShimRun:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


async def run_shim(
    shim: Path,
    command: str,
    config: Mapping[str, Any] | bytes,
    *,
    env: Mapping[str, str] | None = None,
) -> ShimRun:
    stdin = config if isinstance(config, bytes) else json.dumps(config).encode()
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {}), "CNI_COMMAND": command}
    proc = await asyncio.create_subprocess_exec(
        str(shim),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=90)
    assert proc.returncode is not None
    return ShimRun(proc.returncode, out.decode(), err.decode())


@dataclass
class Daemon:
    """A running ``multusd`` subprocess with its own socket, config and cache directories."""

    workdir: Path
    config: dict[str, Any]
    env: Mapping[str, str] | None = None
    args: tuple[str, ...] = ()  # extra command-line arguments
    proc: asyncio.subprocess.Process | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / "daemon.log"

    @property
    def socket_dir(self) -> str:
        return str(self.config["socketDir"])

    @property
    def socket_path(self) -> str:
        return os.path.join(self.socket_dir, "multus.sock")

    @property
    def cni_dir(self) -> Path:
        return Path(self.config["cniDir"])

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    async def start(self, *, wait: bool = True) -> None:
        config_path = self.workdir / "daemon-config.json"
        config_path.write_text(json.dumps(self.config))
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "multusd",
                "--config",
                str(config_path),
                *self.args,
                stdout=log,
                stderr=log,
                cwd=REPO,
                env={**os.environ, **(self.env or {})},
            )
        if wait:
            await self.wait_ready()

    async def wait_ready(self, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while True:
                assert self.proc is not None
                if self.proc.returncode is not None:
                    raise AssertionError(f"daemon exited {self.proc.returncode}: {self.log()}")
                with contextlib.suppress(OSError, aiohttp.ClientError):
                    status, _ = await self.request("GET", "/readyz")
                    if status == 200:
                        return
                await asyncio.sleep(0.05)

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        connector = aiohttp.UnixConnector(path=self.socket_path)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.request(method, f"http://dummy{path}", data=body) as resp,
        ):
            return resp.status, await resp.read()

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc is None:
            return 0
        if self.proc.returncode is not None:
            return self.proc.returncode
        self.proc.send_signal(sig)
        try:
            async with asyncio.timeout(timeout):
                return await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            return await self.proc.wait()


async def ip(*args: str, check: bool = True) -> str:
    """``ip ARGS``; ``ip -n PATH ...`` runs ``ip ...`` in the namespace pinned on ``PATH``
    (``ip -n`` knows only ``ip netns`` names)."""
    argv = ["ip", *args]
    if len(args) >= 2 and args[0] == "-n" and args[1].startswith("/"):
        argv = ["nsenter", f"--net={args[1]}", "ip", *args[2:]]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    if check and proc.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)}: {err.decode()}")
    return out.decode()


async def addresses(netns: str) -> dict[str, list[str]]:
    """``{ifname: ["10.0.0.2/24", ...]}`` inside the namespace ``netns`` (its path)."""
    links = json.loads(await ip("-n", netns, "-j", "addr"))
    return {
        link["ifname"]: [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])]
        for link in links
    }


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for ``healthPort``)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def http_get(port: int, path: str) -> tuple[int, str]:
    """``GET http://127.0.0.1:<port><path>`` as the kubelet's probe sends it: status, body."""
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()
