"""Fault injection for the request-path tests: a plugin that hangs, and a raw HTTP client.

The hanging plugin is a real shell script whose ``sleep`` child is exactly what a killed shell
leaves behind, so a test can tell "the plugin was killed" from "the plugin's group was killed
and reaped". The raw client speaks HTTP/1.1 on the daemon's unix socket byte by byte, for the
inputs no well-behaved client sends (half-closes, stalls, garbage).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.conftest import bridge_plugin
from tests.e2e.harness import PLUGIN_DIR, Daemon, short_id, until_logged
from tests.waits import eventually

HANG = """#!/bin/sh
# Hangs on ADD (and CHECK); DEL succeeds at once. The pids go to {pids}/<container id>.
if [ "$CNI_COMMAND" = ADD ] || [ "$CNI_COMMAND" = CHECK ]; then
  sleep 1000 &
  echo "$$ $!" > "{pids}/$CNI_CONTAINERID"
  wait
fi
"""


@dataclass
class HangRig:
    """A bin dir with the real plugins plus ``hang``, and the delegates that use it."""

    bin_dir: Path
    pids_dir: Path
    ipam_dir: Path

    def delegates(self, bridge: str, workdir: Path) -> list[dict[str, Any]]:
        """The cluster network (bridge + host-local, an IP per pod), then the hanging one."""
        return [
            {"cniVersion": "1.0.0", "name": "testnet", **bridge_plugin(bridge, workdir)},
            {"cniVersion": "1.0.0", "name": "hangnet", "type": "hang"},
        ]

    async def pids(self, container_id: str, timeout: float = 60) -> tuple[int, int]:
        """(shell, its sleep child) once the hanging plugin runs for ``container_id``."""
        path = self.pids_dir / container_id
        await eventually(lambda: path.exists() and path.read_text().strip() != "", timeout)
        leader, child = path.read_text().split()
        return int(leader), int(child)

    def reserved_ips(self) -> list[str]:
        """host-local's reservations for ``testnet`` (one file per allocated address)."""
        directory = self.ipam_dir / "testnet"
        if not directory.is_dir():
            return []
        return sorted(p.name for p in directory.iterdir() if re.fullmatch(r"[0-9.]+", p.name))


def hang_rig(workdir: Path) -> HangRig:
    bin_dir = workdir / "bin"
    pids_dir = workdir / "pids"
    bin_dir.mkdir()
    pids_dir.mkdir()
    for plugin in Path(PLUGIN_DIR).iterdir():
        (bin_dir / plugin.name).symlink_to(plugin)
    hang = bin_dir / "hang"
    hang.write_text(HANG.format(pids=pids_dir))
    hang.chmod(0o755)
    return HangRig(bin_dir, pids_dir, workdir / "ipam")


def gone(pid: int) -> bool:
    """No such process, not even a zombie: killed *and* reaped."""
    return not Path(f"/proc/{pid}").exists()


async def wait_gone(*pids: int, timeout: float = 30) -> bool:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while not all(gone(pid) for pid in pids):
                await asyncio.sleep(0.05)
    return all(gone(pid) for pid in pids)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http_request(
    body: bytes, *, path: str = "/cni", headers: dict[str, str] | None = None
) -> bytes:
    head = {
        "Host": "dummy",
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "Connection": "close",
        **(headers or {}),
    }
    lines = [f"POST {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
    return "\r\n".join(lines).encode() + body


def parse_response(raw: bytes) -> RawResponse:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawResponse(int(status_line.split()[1]), headers, body)


async def exchange(
    socket_path: str, data: bytes, *, half_close: bool = False, timeout: float = 60
) -> bytes:
    """Send ``data`` (optionally shutting down our write side), read until the server closes."""
    reader, writer = await asyncio.open_unix_connection(socket_path)
    try:
        writer.write(data)
        await writer.drain()
        if half_close:
            writer.write_eof()
        async with asyncio.timeout(timeout):
            return await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def post(socket_path: str, body: bytes, **kwargs: Any) -> RawResponse:
    headers = kwargs.pop("headers", None)
    path = kwargs.pop("path", "/cni")
    raw = await exchange(socket_path, http_request(body, path=path, headers=headers), **kwargs)
    return parse_response(raw)


async def closed_by_server(
    reader: asyncio.StreamReader, timeout: float
) -> tuple[bool, bytes]:  # fmt: skip
    """Whether the server closes the connection within ``timeout`` (and what it sent)."""
    try:
        async with asyncio.timeout(timeout):
            return True, await reader.read()
    except TimeoutError:
        return False, b""


def request_body(env: dict[str, str], config: bytes) -> bytes:
    return json.dumps({"env": env, "config": base64.b64encode(config).decode()}).encode()


def no_traceback(log: str) -> bool:
    return "Traceback (most recent call last)" not in log


async def log_barrier(daemon: Daemon) -> str:
    """Wait until every line the daemon logged for the requests answered so far is in its log
    file, and return the marker that says so.

    The log writer is a thread, so a line logged before an answer may reach the file after
    it. It writes in order, though: one more request, refused with a message naming a fresh
    marker (a relative ``CNI_NETNS``), is logged after everything before it, and once the
    marker is in the file, so is all that came first.
    """
    marker = f"log-barrier-{short_id()}"
    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "barrier",
        "CNI_NETNS": marker,
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p",
    }
    response = await post(daemon.socket_path, request_body(env, b"{}"))
    assert marker in response.body.decode(), response
    await until_logged(daemon, marker)
    return marker
