"""The server-config override (docs/upstream.md, "Server-config override"): daemon-config keys win,
bytes re-encoded."""

from __future__ import annotations

import json

import pytest

from cni_shim.errors import DECODING_FAILURE, CNIError
from multusd.config.override import override_config

STDIN = b'{"name":"multus-cni-network", "type":"multus-shim",\n "cniVersion":"0.3.1"}'


def test_unchanged_without_daemon_config_and_not_auto() -> None:
    assert override_config(STDIN, None, ignore_readiness=False) is STDIN
    assert override_config(STDIN, {}, ignore_readiness=False) is STDIN
    # Not even decoded: garbage passes through untouched.
    assert override_config(b"not json", None, ignore_readiness=False) == b"not json"


def test_every_daemon_key_copied_over() -> None:
    daemon = {
        "cniVersion": "1.0.0",
        "chrootDir": "/hostroot",
        "binDir": "/b",
        "systemNamespaces": ["x"],
        "unknownKey": {"nested": [1, 2]},
        "readinessindicatorfile": "/r",
    }
    out = override_config(STDIN, daemon, ignore_readiness=False)
    conf = json.loads(out)
    assert conf == {"name": "multus-cni-network", "type": "multus-shim", **daemon}


def test_output_is_sorted_compact_go_escaped() -> None:
    stdin = b'{"z": 1, "a": "<b>&", "m": {"y": 1, "b": 2}}'
    out = override_config(stdin, {"k": ">"}, ignore_readiness=False)
    assert out == (b'{"a":"\\u003cb\\u003e\\u0026","k":"\\u003e","m":{"b":2,"y":1},"z":1}')


def test_auto_mode_removes_readiness_from_both_sides() -> None:
    stdin = b'{"readinessindicatorfile": "/from-conf", "name": "n"}'
    out = override_config(stdin, {"readinessindicatorfile": "/d", "x": 1}, ignore_readiness=True)
    assert json.loads(out) == {"name": "n", "x": 1}


def test_auto_mode_without_daemon_config_still_rewrites() -> None:
    stdin = b'{"readinessindicatorfile": "/f", "name": "n", "b": 1}'
    assert override_config(stdin, None, ignore_readiness=True) == b'{"b":1,"name":"n"}'


def test_readiness_kept_when_not_auto() -> None:
    out = override_config(b"{}", {"readinessindicatorfile": "/d"}, ignore_readiness=False)
    assert json.loads(out) == {"readinessindicatorfile": "/d"}


@pytest.mark.parametrize("stdin", [b"{", b"[1]", b"\xff", b"null"])
def test_bad_config_is_a_decoding_failure(stdin: bytes) -> None:
    with pytest.raises(CNIError) as info:
        override_config(stdin, {"a": 1}, ignore_readiness=False)
    assert info.value.code == DECODING_FAILURE == 6
    assert info.value.msg.startswith("failed to unmarshall CNI config: ")
