"""Go's ``time.ParseDuration``, for ``perNodeCertificate.certDuration``.

Upstream reads ``certDuration`` with ``time.ParseDuration`` ("10m", "1h30m", "1.5h", "90s"); a
file that works there must mean the same lifetime here, and one that fails there must fail with
the same words (``failed to parse certDuration: time: invalid duration "x"``). Python has no
parser for Go's syntax, so this is a port of Go's (``src/time/format.go``): the same grammar
``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` read byte by byte over UTF-8 (``µs`` and ``μs`` are two
bytes each), the same 63-bit overflow points, and the same error texts with Go's own ``quote``
(non-ASCII and control bytes as ``\\xNN``).
"""

from __future__ import annotations

__all__ = ["NANOSECONDS_PER_SECOND", "GoDurationError", "parse_go_duration"]

NANOSECONDS_PER_SECOND = 1_000_000_000
_MAX = 1 << 63
_UNITS = {
    b"ns": 1,
    b"us": 1_000,
    "µs".encode(): 1_000,  # U+00B5, the micro sign
    "μs".encode(): 1_000,  # U+03BC, the Greek letter mu
    b"ms": 1_000_000,
    b"s": NANOSECONDS_PER_SECOND,
    b"m": 60 * NANOSECONDS_PER_SECOND,
    b"h": 3600 * NANOSECONDS_PER_SECOND,
}
_DIGITS = frozenset(b"0123456789")


class GoDurationError(ValueError):
    """The text is no Go duration; the message is Go's error text."""


def _quote(data: bytes) -> str:
    """Go's ``time.quote``: ``"`` + text + ``"``, with ``"`` and ``\\`` escaped and every byte
    of a non-ASCII or control character as ``\\xNN`` (Go escapes whole characters, which for
    valid UTF-8 is every byte of them; an invalid byte alone is one ``\\xNN`` as well)."""
    out = ['"']
    for byte in data:
        if byte >= 0x80 or byte < 0x20:
            out.append(f"\\x{byte:02x}")
        elif byte in (0x22, 0x5C):
            out.append("\\" + chr(byte))
        else:
            out.append(chr(byte))
    out.append('"')
    return "".join(out)


def _invalid(orig: bytes) -> GoDurationError:
    return GoDurationError(f"time: invalid duration {_quote(orig)}")


def _leading_int(s: bytes, orig: bytes) -> tuple[int, bytes]:
    x = i = 0
    while i < len(s) and s[i] in _DIGITS:
        if x > _MAX // 10:
            raise _invalid(orig)
        x = x * 10 + s[i] - 0x30
        if x > _MAX:
            raise _invalid(orig)
        i += 1
    return x, s[i:]


def _leading_fraction(s: bytes) -> tuple[int, float, bytes]:
    """Digits after the point; past 63 bits further digits are read but add no precision."""
    x, scale, overflow = 0, 1.0, False
    i = 0
    while i < len(s) and s[i] in _DIGITS:
        c = s[i]
        i += 1
        if overflow:
            continue
        if x > (_MAX - 1) // 10:
            overflow = True
            continue
        y = x * 10 + c - 0x30
        if y > _MAX:
            overflow = True
            continue
        x = y
        scale *= 10
    return x, scale, s[i:]


def parse_go_duration(text: str) -> int:
    """Nanoseconds, as ``time.ParseDuration`` returns them; :class:`GoDurationError` with Go's
    text otherwise."""
    orig = text.encode("utf-8", "surrogateescape")
    s = orig
    neg = False
    if s[:1] in (b"-", b"+"):
        neg = s[:1] == b"-"
        s = s[1:]
    if s == b"0":
        return 0
    if not s:
        raise _invalid(orig)
    total = 0
    while s:
        if not (s[0] == 0x2E or s[0] in _DIGITS):
            raise _invalid(orig)
        before = len(s)
        whole, s = _leading_int(s, orig)
        pre = before != len(s)
        frac, scale, post = 0, 1.0, False
        if s[:1] == b".":
            s = s[1:]
            before = len(s)
            frac, scale, s = _leading_fraction(s)
            post = before != len(s)
        if not pre and not post:
            raise _invalid(orig)  # no digits, as ".s" or "-.s"
        i = 0
        while i < len(s) and not (s[i] == 0x2E or s[i] in _DIGITS):
            i += 1
        if i == 0:
            raise GoDurationError(f"time: missing unit in duration {_quote(orig)}")
        unit_text, s = s[:i], s[i:]
        unit = _UNITS.get(unit_text)
        if unit is None:
            raise GoDurationError(
                f"time: unknown unit {_quote(unit_text)} in duration {_quote(orig)}"
            )
        if whole > _MAX // unit:
            raise _invalid(orig)
        value = whole * unit
        if frac > 0:
            # float64, as Go: nanosecond-exact for fractions of hours.
            value += int(float(frac) * (float(unit) / scale))
            if value > _MAX:
                raise _invalid(orig)
        total += value
        if total > _MAX:
            raise _invalid(orig)
    if neg:
        return -total
    if total > _MAX - 1:
        raise _invalid(orig)
    return total
