"""Numbers as Go prints them: ``strconv``'s shortest float texts and the ``float64`` round trip.

Every JSON number Go decodes into ``interface{}`` is a ``float64``, and what comes back out
(a re-encoded config, a cached result, a value quoted in an error text) is printed by
``strconv`` with the shortest digits that read back to the same float, in two layouts:

* ``encoding/json`` (:func:`go_float_text`): plain decimals from 1e-6 up to 1e21, exponent
  form outside (``1e+21``, ``1e-7``);
* ``fmt``'s ``%v``, that is ``strconv.FormatFloat(f, 'g', -1, 64)`` (:func:`format_g`):
  exponent form below 1e-4 and from 1e6 on, with at least two exponent digits (``1e+06``).

Python's ``repr`` finds the same shortest digits, so both layouts are rearrangements of it.
One module for both, because the daemon's error texts, its re-encoded files and the shim's
results all depend on getting them the same way (they used to be written three times).
Stdlib only (``math``, built into the interpreter): :mod:`cni_shim.godecode` loads it on the
shim's result path.
"""

from __future__ import annotations

import math  # built into the interpreter: no file to load

TYPE_CHECKING = False  # typing costs milliseconds at shim start-up; annotations only
if TYPE_CHECKING:
    from typing import Any


class NumLit(str):
    """A JSON number that is not a plain integer, kept as literal text for Go's messages."""

    __slots__ = ()


def number_from_text(text: str) -> Any:
    """An int if ``text`` is a plain integer literal, else the literal as :class:`NumLit`."""
    digits = text[1:] if text.startswith("-") else text
    return int(text) if digits.isascii() and digits.isdigit() else NumLit(text)


def _shortest(value: float) -> tuple[str, int]:
    """The shortest digits of ``abs(value)`` (no leading or trailing zeros) and the position of
    the decimal point in them: ``abs(value) == 0.DIGITS * 10**point``."""
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    whole, _, frac = mantissa.partition(".")
    raw = whole + frac
    digits = raw.lstrip("0")
    point = len(whole) + int(exp_text or 0) - (len(raw) - len(digits))
    return digits.rstrip("0"), point


def go_float_text(value: float) -> str:
    """How encoding/json prints a float64 (shortest digits; exponent below 1e-6, from 1e21)."""
    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    sign = "-" if value < 0 else ""
    digits, point = _shortest(value)
    if 1e-6 <= abs(value) < 1e21:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return sign + digits + "0" * (point - len(digits))
        return f"{sign}{digits[:point]}.{digits[point:]}"
    exp = point - 1
    body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    exp_digits = f"{abs(exp):02d}" if exp >= 0 else str(-exp)  # Go tidies e-07 to e-7
    return f"{sign}{body}e{'+' if exp >= 0 else '-'}{exp_digits}"


def format_g(value: float) -> str:
    """``strconv.FormatFloat(f, 'g', -1, 64)``, which is ``fmt``'s ``%v`` of a ``float64``:
    shortest digits, exponent form below 1e-4 and from 1e6 on, with at least two exponent
    digits (``1e+06``, ``1.5e-05``); ``+Inf``, ``-Inf`` and ``NaN`` as Go spells them.

    A negative zero prints as ``0`` (Go: ``-0``), as both of the former copies did.
    """
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    digits, point = _shortest(value)
    exp = point - 1
    sign = "-" if value < 0 else ""
    if exp < -4 or exp >= 6:
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{body}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def float64_value(number: float) -> int | float:
    """``number`` as encoding/json prints a ``float64`` holding it: an ``int`` when Go's text
    has no fraction or exponent (``1.0`` → ``1``, ``1e3`` → ``1000``, and a large integer
    rounded as Go rounds it), otherwise ``number`` itself."""
    as_text = number_from_text(go_float_text(number))
    return as_text if type(as_text) is int else number
