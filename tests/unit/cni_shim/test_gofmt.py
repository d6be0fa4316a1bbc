"""Go's fmt verbs, %q, errno and exit texts, and decoding into interface{}: the texts libcni's
and upstream's messages are made of."""

from __future__ import annotations

import pytest

from cni_shim import gojsonerr
from cni_shim.gofmt import go_value, slice_str, type_name
from cni_shim.goquote import go_quote
from cni_shim.gosyscall import errno_text, exit_text


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
    assert go_quote(value) == quoted


def test_exit_and_errno_texts() -> None:
    assert exit_text(0) == "exit status 0"
    assert exit_text(2) == "exit status 2"
    assert exit_text(-9) == "signal: killed"
    assert exit_text(-15) == "signal: terminated"
    assert errno_text(2) == "no such file or directory"
    assert errno_text(None) == "unknown error"
    assert slice_str(["/a", "/b"]) == "[/a /b]"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "<nil>"),
        (True, "true"),
        (1, "1"),
        (1.5, "1.5"),
        (1234567, "1.234567e+06"),
        (1e-5, "1e-05"),
        ("x y", "x y"),
        ([1, "a", None], "[1 a <nil>]"),
        ({"gw": "10.0.0.1", "dst": 0.0001}, "map[dst:0.0001 gw:10.0.0.1]"),
        ({"é": 1, "z": {"b": [], "a": {}}}, "map[z:map[a:map[] b:[]] é:1]"),
    ],
)
def test_percent_v_of_decoded_json(value: object, text: str) -> None:
    assert go_value(value) == text


def test_percent_t_of_decoded_json() -> None:
    texts = [type_name(v) for v in (None, False, 1, 1.5, "s", [], {})]
    assert texts == [
        "<nil>",
        "bool",
        "float64",
        "float64",
        "string",
        "[]interface {}",
        "map[string]interface {}",
    ]


def test_numbers_and_maps_like_go() -> None:
    data = b'{"b":1.0,"a":[2.5,1e3,1e21]}'
    assert gojsonerr.loads_any(data) == {"b": 1, "a": [2.5, 1000, 1e21]}
    assert list(gojsonerr.loads_map(b'{"b":{"d":1,"c":2},"a":0}')) == ["a", "b"]
    assert list(gojsonerr.loads_map(b'{"b":{"d":1,"c":2},"a":0}')["b"]) == ["c", "d"]
    with pytest.raises(ValueError, match="invalid character"):
        gojsonerr.loads_any(b"NaN")
