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
    proc = await asyncio.create_subprocess_exec(
        "ip", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    if check and proc.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)}: {err.decode()}")
    return out.decode()


async def addresses(netns: str) -> dict[str, list[str]]:
    """``{ifname: ["10.0.0.2/24", ...]}`` inside the namespace ``netns`` (a name)."""
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
