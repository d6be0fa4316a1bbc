"""The request's config may not hold NUL or lone surrogates; the server settings' defaults."""

from __future__ import annotations

import pytest

from cni_shim.errors import CNIError
from multusd.errors import ConfigError
from multusd.server.settings import ServerSettings, load_server_settings
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


def test_server_settings_defaults() -> None:
    settings = load_server_settings({"unrelated": True})
    assert settings == ServerSettings(
        request_timeout=120.0,
        max_pending_per_container=16,
        max_pending=1024,
        header_timeout=10.0,
        body_timeout=10.0,
    )


def test_server_settings_from_the_daemon_config() -> None:
    settings = load_server_settings(
        {"requestTimeoutSeconds": 30, "maxpendingrequests": 8, "requestBodyTimeoutSeconds": 0.5}
    )
    assert (settings.request_timeout, settings.max_pending, settings.body_timeout) == (30, 8, 0.5)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"maxPendingRequests": 0}, "key 'maxPendingRequests': must be greater than 0, got 0"),
        ({"requestTimeoutSeconds": "1"}, "key 'requestTimeoutSeconds': expected a number"),
        ({"maxPendingRequestsPerContainer": 1.5}, "expected an integer"),
    ],
)
def test_bad_server_settings_stop_start_up(raw: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_server_settings(raw)
