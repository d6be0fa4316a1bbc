"""Go's ``%q`` (``strconv.Quote``): how upstream's error texts quote values.

Operators and tests compare those texts, so the quoting must be Go's: ``\\a``-style escapes,
``\\xNN`` for control bytes and invalid UTF-8, ``\\uNNNN`` for other unprintable characters.
Tiny on purpose: version checks on the shim's hot path need it, the JSON machinery need not load.
"""

from __future__ import annotations

_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(value: str | bytes) -> str:
    """``strconv.Quote``; for ``bytes``, invalid UTF-8 bytes become ``\\xNN`` as Go's ``%q``."""
    text = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte smuggled through surrogateescape
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char.isprintable():
            out.append(char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
