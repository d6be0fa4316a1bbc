"""NaN and Infinity: Python's JSON scanner takes them, Go's refuses them; one rule for every
decoder of the shim and the daemon, in Go's words."""

from __future__ import annotations

import pytest

from cni_shim import godecode, gojson, gojsonerr
from cni_shim.errors import DECODING_FAILURE, CNIError


@pytest.mark.parametrize(
    ("doc", "text"),
    [
        ("NaN", "invalid character 'N' looking for beginning of value"),
        ('{"a": [1, Infinity]}', "invalid character 'I' looking for beginning of value"),
        ('{"a": -Infinity}', "invalid character 'I' in numeric literal"),
    ],
)
def test_constants_are_refused_in_gos_words(doc: str, text: str) -> None:
    with pytest.raises(gojson.ConstantError, match=f"^{text}$"):
        gojson.loads(doc)
    with pytest.raises(CNIError) as info:
        godecode.loads(doc.encode())
    assert (info.value.code, info.value.msg) == (DECODING_FAILURE, text)
    with pytest.raises(gojsonerr.GoJSONError, match=f"^{text}$"):
        gojsonerr.loads(doc)


def test_a_caller_may_still_accept_them() -> None:
    assert gojson.loads("[NaN]", parse_constant=lambda name: name) == ["NaN"]
