"""Just enough rtnetlink (``NETLINK_ROUTE``) to list, delete and add default routes.

The stdlib speaks netlink through ``socket.AF_NETLINK``; the messages are plain C structs, so
``struct`` covers them and no third-party netlink library is needed. Everything here is
blocking and namespace-relative: a netlink socket talks to the namespace of the thread that
created it, so callers create the :class:`RouteSocket` inside the pod's namespace thread
(:func:`multusd.cni.netns.run_in_netns`).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

RTM_NEWROUTE = 24
RTM_DELROUTE = 25
RTM_GETROUTE = 26
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
RTA_DST = 1
RTA_OIF = 4
RTA_GATEWAY = 5
RT_TABLE_MAIN = 254
RTPROT_BOOT = 3
RT_SCOPE_UNIVERSE = 0
RTN_UNICAST = 1
RTM_F_CLONED = 0x200

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_RTMSG = struct.Struct(
    "=BBBBBBBBI"
)  # family, dst_len, src_len, tos, table, proto, scope, type, flags
_RTATTR = struct.Struct("=HH")  # len, type
_ERRNO = struct.Struct("=i")
_U32 = struct.Struct("=I")
_RECV_SIZE = 1 << 16
_DUMP_ATTEMPTS = 5
_TIMEOUT = 10.0


def _align(length: int) -> int:
    return (length + 3) & ~3


@dataclass(frozen=True, slots=True)
class Route:
    """One dumped route; ``body`` is the rtmsg plus attributes exactly as the kernel sent them."""

    family: int
    dst_len: int
    table: int
    flags: int
    attrs: dict[int, bytes]
    body: bytes

    @property
    def oif(self) -> int | None:
        raw = self.attrs.get(RTA_OIF)
        return _U32.unpack_from(raw)[0] if raw is not None and len(raw) >= 4 else None

    @property
    def is_default(self) -> bool:
        """vishvananda/netlink's ``Dst == nil``: the kernel sent no destination at all."""
        return self.dst_len == 0 and RTA_DST not in self.attrs


def _attrs(data: bytes, offset: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while offset + _RTATTR.size <= len(data):
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size or offset + length > len(data):
            break
        out[kind & 0x3FFF] = data[offset + _RTATTR.size : offset + length]
        offset += _align(length)
    return out


def _attr(kind: int, value: bytes) -> bytes:
    length = _RTATTR.size + len(value)
    return _RTATTR.pack(length, kind) + value + b"\0" * (_align(length) - length)


class DumpInterrupted(Exception):
    """The routing table changed during a dump; the kernel asks for a retry."""


class RouteSocket:
    """A blocking rtnetlink socket bound to the calling thread's network namespace."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
        # The kernel always answers; the timeout only keeps a broken namespace from pinning
        # the request (and its thread) forever.
        self._sock.settimeout(_TIMEOUT)
        self._sock.bind((0, 0))
        self._seq = 0

    def __enter__(self) -> RouteSocket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._sock.close()

    def _send(self, msg_type: int, flags: int, body: bytes) -> int:
        self._seq += 1
        header = _NLMSGHDR.pack(_NLMSGHDR.size + len(body), msg_type, flags, self._seq, 0)
        self._sock.send(header + body)
        return self._seq

    def _messages(self, seq: int) -> Iterator[tuple[int, int, bytes]]:
        """Yield ``(type, flags, payload)`` answering ``seq`` until the exchange ends."""
        while True:
            data = self._sock.recv(_RECV_SIZE)
            offset = 0
            while offset + _NLMSGHDR.size <= len(data):
                length, kind, flags, msg_seq, _pid = _NLMSGHDR.unpack_from(data, offset)
                if length < _NLMSGHDR.size:
                    return
                payload = data[offset + _NLMSGHDR.size : offset + length]
                offset += _align(length)
                if msg_seq != seq:
                    continue  # a stale answer to an earlier request
                yield kind, flags, payload
                if kind in (NLMSG_DONE, NLMSG_ERROR):
                    return

    def _dump_once(self) -> list[Route]:
        seq = self._send(RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, _RTMSG.pack(*[0] * 9))
        routes: list[Route] = []
        interrupted = False
        for kind, flags, payload in self._messages(seq):
            interrupted |= bool(flags & NLM_F_DUMP_INTR)
            if kind == NLMSG_ERROR:
                code = -_ERRNO.unpack_from(payload)[0]
                if code:
                    raise OSError(code, os.strerror(code))
                continue
            if kind != RTM_NEWROUTE or len(payload) < _RTMSG.size:
                continue
            family, dst_len, _src, _tos, table, _proto, _scope, _type, rflags = _RTMSG.unpack_from(
                payload
            )
            routes.append(
                Route(family, dst_len, table, rflags, _attrs(payload, _RTMSG.size), payload)
            )
        if interrupted:
            raise DumpInterrupted
        return routes

    def dump_routes(self) -> list[Route]:
        """Every route of every family and table (``ip route show table all``, both families)."""
        for _ in range(_DUMP_ATTEMPTS - 1):
            try:
                return self._dump_once()
            except DumpInterrupted:
                continue
        try:
            return self._dump_once()
        except DumpInterrupted:
            raise OSError(errno.EINTR, os.strerror(errno.EINTR)) from None

    def _request(self, msg_type: int, flags: int, body: bytes) -> None:
        """Send one request and wait for its acknowledgement; a kernel error is an OSError."""
        seq = self._send(msg_type, flags | NLM_F_REQUEST | NLM_F_ACK, body)
        for kind, _flags, payload in self._messages(seq):
            if kind == NLMSG_ERROR:
                code = -_ERRNO.unpack_from(payload)[0]
                if code:
                    raise OSError(code, os.strerror(code))
                return

    def delete(self, route: Route) -> None:
        """Delete ``route`` by sending it back as dumped (what ``ip route flush`` does)."""
        self._request(RTM_DELROUTE, 0, route.body)

    def add_default(self, gateway: bytes, oif: int) -> None:
        """``ip route add default via <gateway> dev <oif>`` in the main table.

        ``gateway`` is 4 bytes (IPv4) or 16 (IPv6). Raises ``OSError(EEXIST)`` when the route
        is already there, like the kernel.
        """
        family = socket.AF_INET if len(gateway) == 4 else socket.AF_INET6
        header = _RTMSG.pack(
            family, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST, 0
        )
        body = header + _attr(RTA_GATEWAY, gateway) + _attr(RTA_OIF, _U32.pack(oif))
        self._request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, body)
