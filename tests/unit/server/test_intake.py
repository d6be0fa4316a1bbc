"""server.intake on a real listening unix socket: what is read at once, what waits unread, in
which order, and what is answered without being read."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cni_shim.errors import TRY_AGAIN_LATER, CNIError
from multusd.server.handlers import error_response
from multusd.server.intake import Intake, IntakeLimits, on_the_wire, read_hint
from tests.waits import eventually


def _request(command: str = "ADD", container: str = "c1", path: str = "/cni") -> bytes:
    env = {"CNI_ARGS": "", "CNI_COMMAND": command, "CNI_CONTAINERID": container}
    body = json.dumps({"env": env, "config": ""}, separators=(",", ":")).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: dummy\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


@dataclass
class Rig:
    path: str
    intake: Intake
    served: list[tuple[socket.socket, Callable[[], None] | None]] = field(default_factory=list)
    arrived: list[float | None] = field(default_factory=list)
    """The arrival time each served connection was handed over with."""
    clients: list[socket.socket] = field(default_factory=list)

    async def send(self, data: bytes) -> socket.socket:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(self.path)
        client.sendall(data)
        self.clients.append(client)
        return client

    def heads(self) -> list[bytes]:
        return [sock.recv(4096, socket.MSG_PEEK) for sock, _ in self.served]

    async def settle(self, served: int, waiting: int | None = None) -> None:
        await eventually(
            lambda: (
                len(self.served) >= served and (waiting is None or self.intake.waiting == waiting)
            ),
            10,
            interval=0.005,
        )


def _answer(client: socket.socket) -> tuple[bytes, dict[str, object]]:
    client.settimeout(10)
    data = b""
    while chunk := client.recv(4096):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, json.loads(body)


@contextlib.asynccontextmanager
async def _started(tmp_path: Path, limits: IntakeLimits) -> AsyncIterator[Rig]:
    """An intake on a fresh listening socket, recording what it serves; all closed after."""
    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    served: list[tuple[socket.socket, Callable[[], None] | None]] = []
    arrived: list[float | None] = []

    def serve(sock: socket.socket, end: Callable[[], None] | None, at: float | None) -> None:
        served.append((sock, end))
        arrived.append(at)

    rig = Rig(path, Intake(listener, serve, limits), served, arrived)
    rig.intake.start()
    try:
        yield rig
    finally:
        rig.intake.close()
        for sock, _ in served:
            sock.close()
        for client in rig.clients:
            client.close()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with _started(tmp_path, IntakeLimits(2, 6, 5.0)) as started:
        yield started


@pytest.mark.parametrize(
    ("head", "cni", "command", "container"),
    [
        (b"GET /healthz HTTP/1.1\r\n", False, b"", b""),
        (b"POST /readyz HTTP/1.1\r\n", False, b"", b""),
        (b"\x16\x03\x01\x02\x00", False, b"", b""),
        (b"POST /cni?x=1 HTTP/1.1\r\nHost: d\r\n", True, b"", b""),
        (_request("DEL", "abc"), True, b"DEL", b"abc"),
        (_request("ADD", "abc", "/delegate"), True, b"ADD", b"abc"),
    ],
)
def test_the_hint_of_a_request(head: bytes, cni: bool, command: bytes, container: bytes) -> None:
    hint = read_hint(head)
    assert hint is not None
    assert (hint.cni, hint.command, hint.container) == (cni, command, container)


@pytest.mark.parametrize("head", [b"P", b"POST /c", b"POST /cni", b"POST /delegate HTT"])
def test_a_beginning_of_a_cni_request_line_waits_for_the_rest(head: bytes) -> None:
    assert read_hint(head) is None


async def test_cni_requests_beyond_the_limit_wait_unread_in_order(rig: Rig) -> None:
    for name in ("a", "b", "c", "d"):
        await rig.send(_request("ADD", name))
    await rig.settle(2, waiting=2)
    assert [b'"CNI_CONTAINERID":"a"' in h for h in rig.heads()] == [True, False]
    first_end = rig.served[0][1]
    assert first_end is not None
    first_end()
    await rig.settle(3, waiting=1)
    assert b'"CNI_CONTAINERID":"c"' in rig.heads()[2]
    # The request waiting was never read: all of it is still in the socket.
    assert rig.heads()[2] == _request("ADD", "c")


async def test_probes_and_other_requests_never_wait(rig: Rig) -> None:
    for name in ("a", "b", "c"):
        await rig.send(_request("ADD", name))
    await rig.settle(2, waiting=1)
    await rig.send(b"GET /healthz HTTP/1.1\r\nHost: dummy\r\n\r\n")
    await rig.send(b"POST /readyz HTTP/1.1\r\nHost: dummy\r\nContent-Length: 4\r\n\r\nnull")
    await rig.settle(4, waiting=1)
    assert [end is None for _, end in rig.served[2:]] == [True, True]


async def test_a_del_takes_the_reserve_and_goes_before_waiting_adds(rig: Rig) -> None:
    for name in ("a", "b", "c"):
        await rig.send(_request("ADD", name))
    await rig.settle(2, waiting=1)
    await rig.send(_request("DEL", "x"))  # the reserve: max(1, 2 // 2) = 1 slot
    await rig.settle(3, waiting=1)
    await rig.send(_request("DEL", "y"))  # no slot left: waits, ahead of the ADD of c
    await rig.settle(3, waiting=2)
    end = rig.served[0][1]
    assert end is not None
    end()
    await rig.settle(4, waiting=1)
    assert b'"CNI_CONTAINERID":"y"' in rig.heads()[3]


async def test_a_del_supersedes_the_waiting_add_of_its_container(rig: Rig) -> None:
    await rig.send(_request("ADD", "a"))
    await rig.send(_request("ADD", "b"))
    waiting = await rig.send(_request("ADD", "c"))
    await rig.settle(2, waiting=1)
    await rig.send(_request("DEL", "c"))
    await rig.settle(3, waiting=0)
    head, error = _answer(waiting)
    assert head.startswith(b"HTTP/1.1 400 ") and b"Connection: close" in head
    assert error == {"code": 999, "msg": "superseded by a DEL of the same container"}


async def test_beyond_max_pending_the_answer_is_code_11_at_once(rig: Rig) -> None:
    clients = [await rig.send(_request("ADD", f"p{i}")) for i in range(7)]
    await rig.settle(2, waiting=4)  # 2 served + 4 waiting = maxPendingRequests 6
    _, error = _answer(clients[-1])
    assert error["code"] == 11 and "maxPendingRequests" in str(error["msg"]), error


async def test_closing_answers_the_waiting_requests_code_11(rig: Rig) -> None:
    clients = [await rig.send(_request("ADD", f"p{i}")) for i in range(3)]
    await rig.settle(2, waiting=1)
    rig.intake.close()
    _, error = _answer(clients[2])
    assert error == {"code": 11, "msg": "the daemon is shutting down; try again later"}


async def test_a_waiting_request_whose_client_is_gone_is_skipped(rig: Rig) -> None:
    for name in ("a", "b"):
        await rig.send(_request("ADD", name))
    gone = await rig.send(_request("ADD", "gone"))
    await rig.send(_request("ADD", "d"))
    await rig.settle(2, waiting=2)
    gone.close()
    end = rig.served[0][1]
    assert end is not None
    end()
    await rig.settle(3, waiting=0)
    assert b'"CNI_CONTAINERID":"d"' in rig.heads()[2]


async def test_a_silent_connection_is_closed_after_the_header_timeout(tmp_path: Path) -> None:
    async with _started(tmp_path, IntakeLimits(2, 6, 0.2)) as rig:
        reader, writer = await asyncio.open_unix_connection(rig.path)
        async with asyncio.timeout(10):
            assert await reader.read() == b""
        writer.close()
        assert rig.served == []


async def test_an_add_that_waited_unread_for_the_request_timeout_is_answered_code_11(
    tmp_path: Path,
) -> None:
    """The requests ahead are stuck: the waiting ADD gets "try again later" at its time; a
    waiting DEL does not expire (it may never be asked again)."""
    limits = IntakeLimits(1, 6, 5.0, wait_timeout=0.2)  # one slot, and one more for DELs
    async with _started(tmp_path, limits) as rig:
        await rig.send(_request("ADD", "a"))
        waiting_add = await rig.send(_request("ADD", "b"))
        await rig.send(_request("DEL", "c"))  # the reserve
        await rig.send(_request("DEL", "d"))  # waits
        await rig.settle(2, waiting=2)
        await rig.settle(2, waiting=1)  # the ADD's time is up
        _, error = _answer(waiting_add)
        assert error["code"] == 11, error
        assert str(error["msg"]).startswith("waited 0s unread behind 2 requests in the daemon")
        assert "(requestTimeoutSeconds); try again later" in str(error["msg"])
        # The DEL still waits for a slot, and no timer will answer it: the ADD's expiry armed
        # none for it (the next expiry is only ever an ADD's or a CHECK's).
        assert rig.intake.waiting == 1
        assert rig.intake.expires_at is None
        end = rig.served[0][1]
        assert end is not None
        end()
        await rig.settle(3, waiting=0)
        assert b'"CNI_CONTAINERID":"d"' in rig.heads()[2]


async def test_a_cni_request_is_handed_over_with_the_time_it_arrived(tmp_path: Path) -> None:
    """The request's deadline counts from its arrival (``handlers``), so the time it waited
    unread goes with it; what is no CNI request carries none."""
    loop = asyncio.get_running_loop()
    async with _started(tmp_path, IntakeLimits(1, 6, 5.0)) as rig:
        await rig.send(_request("ADD", "a"))
        await rig.send(_request("ADD", "b"))
        await rig.settle(1, waiting=1)
        sent_b = loop.time()
        await asyncio.sleep(0.2)  # the scenario: b waits unread a while (load only lengthens it)
        end = rig.served[0][1]
        assert end is not None
        end()
        await rig.settle(2)
        arrived_b = rig.arrived[1]
        assert arrived_b is not None and arrived_b <= sent_b  # not when it was read
        await rig.send(b"GET /healthz HTTP/1.1\r\nHost: dummy\r\n\r\n")
        await rig.settle(3)
        assert rig.arrived[2] is None


def test_an_answer_without_serving_is_the_api_s_error_response_on_the_wire() -> None:
    raw = on_the_wire(error_response(CNIError(TRY_AGAIN_LATER, "try again later")))
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 400 Bad Request"
    assert b"Content-Type: application/json" in lines and b"Connection: close" in lines
    assert f"Content-Length: {len(body)}".encode() in lines
    assert json.loads(body) == {"code": 11, "msg": "try again later"}


async def test_a_new_listener_takes_over_and_the_old_backlog_is_served(
    rig: Rig, tmp_path: Path
) -> None:
    """The socket's file was lost and bound again (``server.socketguard``): a client that had
    connected to the old socket before is still served, then new ones come through the new."""
    early = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    early.connect(rig.path)  # in the old socket's backlog: the loop has not run since
    early.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
    rig.clients.append(early)
    old = rig.intake.listener
    os.unlink(rig.path)
    new = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    new.bind(rig.path)
    new.listen(8)
    rig.intake.replace_listener(new)
    assert old.fileno() == -1  # taken from, then closed
    await rig.send(b"GET /readyz HTTP/1.1\r\n\r\n")
    await rig.settle(2)
    assert sorted(head.split(b" ")[1] for head in rig.heads()) == [b"/healthz", b"/readyz"]
