"""Go formatting rules that leak into libcni's texts and bytes."""

from __future__ import annotations

import pytest

from multusd.cni import gofmt


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("plain", '"plain"'),
        ('a"b\\c\n\t', '"a\\"b\\\\c\\n\\t"'),
        ("\x00\x7f", '"\\x00\\x7f"'),
        ("héllo ✓", '"héllo ✓"'),
        ("\u200b", '"\\u200b"'),
        (b"bad\xffbyte", '"bad\\xffbyte"'),
    ],
)
def test_quote(value: str | bytes, quoted: str) -> None:
    assert gofmt.quote(value) == quoted


def test_exit_and_errno_texts() -> None:
    assert gofmt.exit_text(0) == "exit status 0"
    assert gofmt.exit_text(2) == "exit status 2"
    assert gofmt.exit_text(-9) == "signal: killed"
    assert gofmt.exit_text(-15) == "signal: terminated"
    assert gofmt.errno_text(2) == "no such file or directory"
    assert gofmt.slice_str(["/a", "/b"]) == "[/a /b]"


def test_numbers_and_maps_like_go() -> None:
    assert gofmt.loads(b'{"b":1.0,"a":[2.5,1e3,1e21]}') == {"b": 1, "a": [2.5, 1000, 1e21]}
    assert list(gofmt.loads_map(b'{"b":{"d":1,"c":2},"a":0}')) == ["a", "b"]
    assert list(gofmt.loads_map(b'{"b":{"d":1,"c":2},"a":0}')["b"]) == ["c", "d"]
    with pytest.raises(ValueError, match="invalid character"):
        gofmt.loads(b"NaN")
