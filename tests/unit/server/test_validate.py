"""The request's config may not hold NUL or lone surrogates."""

from __future__ import annotations

import pytest

from cni_shim.errors import CNIError
from multusd.server.validate import check_config_text


@pytest.mark.parametrize(
    "config",
    [
        b'{"name":"n\\u0000"}',
        b'{"name":"n","\\u0000":1}',
        b'{"plugins":[{"x":["\\ud800"]}]}',
        b'{"name":"\\udfff"}',
        b'{"name":"\\ude00\\ud83d"}',  # a pair in the wrong order is two lone halves
    ],
)
def test_configs_with_nul_or_lone_surrogates_are_refused(config: bytes) -> None:
    with pytest.raises(CNIError) as info:
        check_config_text(config)
    assert info.value.code == 6
    assert info.value.msg.startswith("invalid network config: a JSON string holds ")


@pytest.mark.parametrize(
    "config",
    [
        b'{"name":"n","type":"x"}',
        b'{"name":"\\ud83d\\ude00 \\u00e9"}',  # a valid pair, and a plain escape
        b"{not json \\u0000",  # the command reports this one, in its own words
        b"",
    ],
)
def test_other_configs_pass(config: bytes) -> None:
    check_config_text(config)
