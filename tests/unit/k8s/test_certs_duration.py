"""``certDuration`` means what Go's ``time.ParseDuration`` says, errors worded as Go's.

The expected values were produced by Go's own ``time.ParseDuration`` (go1.19, whose parser
upstream's Go versions share): a parser port that drifts on an edge (a fraction, the 63-bit
overflow, a micro sign, an invalid byte) fails here."""

from __future__ import annotations

import pytest

from multusd.k8s.certs.duration import GoDurationError, parse_go_duration

GO_RESULTS: list[tuple[str, int | str]] = [
    ("10m", 600_000_000_000),
    ("1h30m", 5_400_000_000_000),
    ("1.5h", 5_400_000_000_000),
    ("90s", 90_000_000_000),
    ("0", 0),
    ("-0", 0),
    ("+5m", 300_000_000_000),
    ("", 'time: invalid duration ""'),
    ("-", 'time: invalid duration "-"'),
    ("10", 'time: missing unit in duration "10"'),
    (".s", 'time: invalid duration ".s"'),
    ("-.5m", -30_000_000_000),
    ("1.m", 60_000_000_000),
    (".5s", 500_000_000),
    ("5x", 'time: unknown unit "x" in duration "5x"'),
    ("1h2", 'time: missing unit in duration "1h2"'),
    ("3000000h", 'time: invalid duration "3000000h"'),
    ("9223372036854775807ns", 9_223_372_036_854_775_807),
    ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
    ("-9223372036854775808ns", -9_223_372_036_854_775_808),
    ("1µs", 1000),
    ("1μs", 1000),
    ("1\u00e9s", 'time: unknown unit "\\xc3\\xa9s" in duration "1\\xc3\\xa9s"'),
    ("10m\x01", 'time: unknown unit "m\\x01" in duration "10m\\x01"'),
    ("1.0000000000000000000000001h", 3_600_000_000_000),
    ("0.1ns", 0),
    ("2562047h47m16.854775807s", 9_223_372_036_854_775_807),
    ("2562047h47m16.854775808s", 'time: invalid duration "2562047h47m16.854775808s"'),
    ("1d", 'time: unknown unit "d" in duration "1d"'),
    ("1h-1m", 'time: unknown unit "h-" in duration "1h-1m"'),
    (" 1m", 'time: invalid duration " 1m"'),
    ('5m"q', 'time: unknown unit "m\\"q" in duration "5m\\"q"'),
    ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
]


@pytest.mark.parametrize(("text", "expected"), GO_RESULTS)
def test_as_go_parses_it(text: str, expected: int | str) -> None:
    if isinstance(expected, int):
        assert parse_go_duration(text) == expected
    else:
        with pytest.raises(GoDurationError) as info:
            parse_go_duration(text)
        assert str(info.value) == expected
