"""IP addresses as Go's ``net.ParseIP``, ``net.ParseCIDR`` and ``String()`` see them.

libcni stores addresses as ``net.IP``/``net.IPNet`` and prints them back, so what a plugin
wrote is not what the runtime reads: ``2001:DB8::0001`` becomes ``2001:db8::1``,
``::ffff:10.0.0.1/120`` becomes ``10.0.0.1/24``, zones and leading zeros are refused. Python's
``ipaddress`` differs on each of these (and costs an import), so this follows Go's parser
(``netip``, Go ≥ 1.22) step by step instead.
"""

from __future__ import annotations

V4_PREFIX = b"\x00" * 10 + b"\xff\xff"
_HEX = frozenset("0123456789abcdefABCDEF")


def parse_ip(text: str) -> bytes | None:
    """``net.ParseIP``: 16 bytes (IPv4 in v4-mapped form), or None."""
    parsed = _parse_addr(text)
    return None if parsed is None else parsed[0]


def format_ip(ip: bytes) -> str:
    """``net.IP.String()`` of a 16-byte address: dotted for IPv4, RFC 5952 for IPv6."""
    if ip[:12] == V4_PREFIX:
        return ".".join(str(byte) for byte in ip[12:])
    words = [int.from_bytes(ip[i : i + 2], "big") for i in range(0, 16, 2)]
    best_start, best_len, run_start = -1, 0, -1
    for i in range(9):
        if i < 8 and words[i] == 0:
            if run_start < 0:
                run_start = i
        elif run_start >= 0:
            if i - run_start > best_len:
                best_start, best_len = run_start, i - run_start
            run_start = -1
    hexes = [f"{word:x}" for word in words]
    if best_len < 2:  # a single zero group is not shortened
        return ":".join(hexes)
    return ":".join(hexes[:best_start]) + "::" + ":".join(hexes[best_start + best_len :])


def canonical_ip(text: str) -> str | None:
    """The text Go prints after parsing ``text`` as a ``net.IP``; None if Go refuses it."""
    ip = parse_ip(text)
    return None if ip is None else format_ip(ip)


def canonical_cidr(text: str) -> str | None:
    """``net.ParseCIDR`` then ``IPNet.String()``, host bits kept as libcni keeps them."""
    addr, sep, mask = text.partition("/")
    parsed = _parse_addr(addr) if sep else None
    if parsed is None or not mask.isascii() or not mask.isdigit() or len(mask) > 7:
        return None
    ip, is4 = parsed
    bits = int(mask)
    if bits > (32 if is4 else 128):
        return None
    if not is4 and ip[:12] == V4_PREFIX:
        # A v4-mapped IPv6 keeps a 16-byte mask; String() prints the IPv4 address and the
        # mask's last 32 bits.
        bits = max(0, bits - 96)
    return f"{format_ip(ip)}/{bits}"


def _parse_addr(text: str) -> tuple[bytes, bool] | None:
    """``netip.ParseAddr`` minus zones: the 16 bytes and whether it was written as IPv4."""
    for char in text:
        if char == ".":
            v4 = _parse_v4(text)
            return None if v4 is None else (V4_PREFIX + v4, True)
        if char == ":":
            v6 = _parse_v6(text)
            return None if v6 is None else (v6, False)
        if char == "%":
            return None
    return None


def _parse_v4(text: str) -> bytes | None:
    fields = text.split(".")
    if len(fields) != 4:
        return None
    out = bytearray()
    for field in fields:
        if not field or not field.isascii() or not field.isdigit():
            return None
        if len(field) > 1 and field[0] == "0":
            return None  # leading zeros are refused since Go 1.17
        value = int(field)
        if value > 255:
            return None
        out.append(value)
    return bytes(out)


def _parse_v6(text: str) -> bytes | None:
    # netip's corner cases are part of what Go accepts: a field may have more than four hex
    # digits if its value fits, and an embedded IPv4 may only replace the last two fields.
    if "%" in text:
        return None  # a zone; ParseIP and ParseCIDR both refuse them
    rest = text
    ip = bytearray(16)
    ellipsis = -1
    if rest.startswith("::"):
        ellipsis, rest = 0, rest[2:]
        if not rest:
            return bytes(ip)
    i = 0
    while i < 16:
        off = acc = 0
        while off < len(rest) and rest[off] in _HEX:
            acc = acc * 16 + int(rest[off], 16)
            if acc > 0xFFFF:
                return None
            off += 1
        if off == 0:
            return None
        if off < len(rest) and rest[off] == ".":
            if (ellipsis < 0 and i != 12) or i + 4 > 16:
                return None
            v4 = _parse_v4(rest)
            if v4 is None:
                return None
            ip[i : i + 4] = v4
            rest = ""
            i += 4
            break
        ip[i], ip[i + 1] = acc >> 8, acc & 0xFF
        i += 2
        rest = rest[off:]
        if not rest:
            break
        if rest[0] != ":" or len(rest) == 1:
            return None
        rest = rest[1:]
        if rest[0] == ":":
            if ellipsis >= 0:
                return None
            ellipsis, rest = i, rest[1:]
            if not rest:
                break
    if rest:
        return None
    if i < 16:
        if ellipsis < 0:
            return None
        gap = 16 - i
        ip[ellipsis + gap : 16] = ip[ellipsis:i]
        ip[ellipsis : ellipsis + gap] = bytes(gap)
    elif ellipsis >= 0:
        return None  # the :: must stand for at least one group
    return bytes(ip)
