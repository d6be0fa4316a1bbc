"""The probes' site (``healthPort``) over real TCP: the kubelet's ``httpGet`` and ``HEAD``
answered with the unix socket's answers, nothing else routed, one request per connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from multusd.cni.invoke import SubprocessExecutor
from multusd.commands.context import Services
from multusd.server.handlers import DaemonState, Handlers
from multusd.server.health import HOST, health_site


@pytest.fixture
async def probes() -> AsyncIterator[tuple[Handlers, int]]:
    handlers = Handlers(
        services=Services(executor=SubprocessExecutor()),
        daemon_raw={"requestHeaderTimeoutSeconds": 1},
        ignore_readiness=True,
        state=DaemonState(ready_reason="caches synced"),
    )
    async with health_site(handlers, 0) as port:
        yield handlers, port


async def _talk(port: int, data: bytes) -> tuple[int, bytes, bytes]:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(data)
    try:
        async with asyncio.timeout(20):
            raw = await reader.read()  # returns: every answer closes its connection
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), head, body


@pytest.mark.parametrize(
    ("request_line", "status", "body"),
    [
        (b"GET /healthz", 200, b""),
        (b"HEAD /healthz", 200, b""),
        (b"HEAD /readyz", 200, b""),  # the head alone
        (b"POST /healthz", 405, b"Method not allowed\n"),
        (b"GET /cni", 404, b""),  # only the probes: no CNI over TCP
    ],
)
async def test_the_probes_and_nothing_else(
    probes: tuple[Handlers, int], request_line: bytes, status: int, body: bytes
) -> None:
    _, port = probes
    got, head, answered = await _talk(port, request_line + b" HTTP/1.1\r\nHost: h\r\n\r\n")
    assert (got, answered) == (status, body), head
    assert b"Connection: close" in head


async def test_readyz_says_what_the_unix_socket_says(probes: tuple[Handlers, int]) -> None:
    handlers, port = probes
    status, _, body = await _talk(port, b"GET /readyz HTTP/1.1\r\nHost: h\r\n\r\n")
    assert (status, json.loads(body)) == (200, {"ready": True, "caches": "caches synced"})
    handlers.state.shutting_down = True
    status, _, body = await _talk(port, b"GET /readyz HTTP/1.1\r\nHost: h\r\n\r\n")
    assert (status, json.loads(body)["ready"]) == (500, False)


async def test_a_silent_connection_is_closed_after_the_header_timeout(
    probes: tuple[Handlers, int],
) -> None:
    _, port = probes
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHo")
    async with asyncio.timeout(20):
        assert await reader.read() == b""
    writer.close()
