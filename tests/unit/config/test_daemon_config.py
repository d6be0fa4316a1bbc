"""``daemon-config.json`` decoding: upstream defaults, Go-style key folding, strict types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from multusd.config.daemon import (
    DaemonConfig,
    LogOptions,
    PerNodeCertificate,
    decode_daemon_config,
    load_daemon_config,
    parse_daemon_config,
)
from multusd.config.schema import decode
from multusd.errors import EXIT_CONFIG, ConfigError


def parse(obj: Any) -> tuple[DaemonConfig, dict[str, Any]]:
    return parse_daemon_config(json.dumps(obj).encode(), "test.json")


def config_error(obj: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(obj)
    return info.value


def test_defaults_match_upstream() -> None:
    config, raw = parse({})
    assert raw == {}
    # (a) daemon process
    assert config.socket_dir == "/run/multus/"
    assert config.chroot_dir == ""
    assert config.log_file == ""
    assert config.log_level == ""
    assert config.log_to_stderr is False
    assert config.log_options is None
    assert config.metrics_port is None
    assert config.enable_pprof is False
    assert config.connection_limit is None
    assert config.per_node_certificate is None
    # (b) generator
    assert config.cni_version == ""
    assert config.multus_config_file == "auto"
    assert config.multus_autoconfig_dir == ""
    assert config.multus_master_cni == ""
    assert config.cni_config_dir == "/etc/cni/net.d"
    assert config.force_cni_version is False
    assert config.override_network_name is False
    assert config.readiness_indicator_file == ""
    assert config.type == "multus-shim"
    assert config.capabilities == {}
    assert config.daemon_socket_dir == ""
    assert config.auxiliary_cni_chain_name == ""
    # (c) request-time keys
    assert config.bin_dir == "/opt/cni/bin"
    assert config.conf_dir == "/etc/cni/multus/net.d"
    assert config.cni_dir == "/var/lib/cni/multus"
    assert config.kubeconfig == ""
    assert config.cluster_network == ""
    assert config.default_networks == []
    assert config.multus_namespace == "kube-system"
    assert config.system_namespaces == ["kube-system"]
    assert config.namespace_isolation is False
    assert config.global_namespaces == ""
    assert config.retry_delete_on_error is False
    # multusd additions
    assert config.plugin_timeout is None
    assert config.max_request_bytes == 4 * 1024 * 1024
    assert config.extra == {}


def test_nested_defaults() -> None:
    cert = decode(PerNodeCertificate, {})
    assert (cert.enabled, cert.bootstrap_kubeconfig, cert.cert_dir, cert.cert_duration) == (
        False,
        "",
        "",
        "10m",
    )
    options = decode(LogOptions, {})
    assert (options.max_age, options.max_size, options.max_backups, options.compress) == (
        None,
        None,
        None,
        None,
    )


def test_every_key_is_read() -> None:
    config, _ = parse(
        {
            "socketDir": "/s",
            "chrootDir": "/hostroot",
            "logFile": "/l",
            "logLevel": "debug",
            "logToStderr": True,
            "logOptions": {"maxAge": 1, "maxSize": 2, "maxBackups": 3, "compress": False},
            "metricsPort": 9091,
            "enablePprof": True,
            "connectionLimit": 7,
            "perNodeCertificate": {"enabled": True, "certDir": "/c", "certDuration": "1h"},
            "multusConfigFile": "/x.conf",
            "readinessindicatorfile": "/r",
            "capabilities": {"portMappings": True},
            "systemNamespaces": ["a", "b"],
            "pluginTimeoutSeconds": 2.5,
        }
    )
    assert config.socket_dir == "/s"
    assert config.chroot_dir == "/hostroot"
    assert config.log_options == decode(
        LogOptions, {"maxAge": 1, "maxSize": 2, "maxBackups": 3, "compress": False}
    )
    assert config.metrics_port == 9091
    assert config.connection_limit == 7
    assert config.per_node_certificate is not None
    assert config.per_node_certificate.cert_dir == "/c"
    assert config.per_node_certificate.cert_duration == "1h"
    assert config.readiness_indicator_file == "/r"
    assert config.capabilities == {"portMappings": True}
    assert config.system_namespaces == ["a", "b"]
    assert config.plugin_timeout == 2.5
    assert not config.is_auto


def test_keys_match_ignoring_case_last_duplicate_wins() -> None:
    data = b'{"SOCKETDIR": "/a", "socketdir": "/b", "LogLevel": "error", "BINDIR": "/bin"}'
    config, raw = parse_daemon_config(data)
    assert config.socket_dir == "/b"
    assert config.log_level == "error"
    assert config.bin_dir == "/bin"
    # The raw view keeps the file's own spelling for the request-time override.
    assert raw == {"SOCKETDIR": "/a", "socketdir": "/b", "LogLevel": "error", "BINDIR": "/bin"}


def test_unknown_keys_are_kept() -> None:
    config, raw = parse({"somethingElse": {"x": 1}, "name": "n"})
    assert config.extra == {"somethingElse": {"x": 1}, "name": "n"}
    assert raw["somethingElse"] == {"x": 1}


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        ({"logToStderr": "yes"}, "logToStderr"),
        ({"metricsPort": "1"}, "metricsPort"),
        ({"connectionLimit": 1.5}, "connectionLimit"),
        ({"socketDir": 5}, "socketDir"),
        ({"systemNamespaces": "kube-system"}, "systemNamespaces"),
        ({"capabilities": {"portMappings": "true"}}, "capabilities"),
        ({"perNodeCertificate": {"enabled": 1}}, "perNodeCertificate.enabled"),
        ({"logOptions": {"maxAge": "5"}}, "logOptions.maxAge"),
        ({"pluginTimeoutSeconds": "5"}, "pluginTimeoutSeconds"),
        ({"pluginTimeoutSeconds": True}, "pluginTimeoutSeconds"),
    ],
)
def test_types_are_strict_and_errors_name_the_key(obj: dict[str, Any], key: str) -> None:
    err = config_error(obj)
    text = str(err)
    assert "\n" not in text
    assert text.startswith("daemon config test.json: ")
    assert f"'{key}" in text
    assert err.exit_code == EXIT_CONFIG == 1


@pytest.mark.parametrize("limit", [0, -3])
def test_connection_limit_must_be_positive(limit: int) -> None:
    text = str(config_error({"connectionLimit": limit}))
    assert f"connection limit must be greater than 0, got {limit}" in text
    assert "connectionLimit" in text
    assert "Value error" not in text


def test_server_limits_defaults() -> None:
    config, _ = parse({"unrelated": True})
    assert (
        config.request_timeout,
        config.max_pending_per_container,
        config.max_pending,
        config.max_active,
        config.header_timeout,
        config.body_timeout,
    ) == (120.0, 16, 1024, 32, 10.0, 10.0)


def test_server_limits_from_the_daemon_config() -> None:
    config, _ = parse(
        {"requestTimeoutSeconds": 30, "maxpendingrequests": 8, "requestBodyTimeoutSeconds": 0.5}
    )
    assert (config.request_timeout, config.max_pending, config.body_timeout) == (30, 8, 0.5)
    assert config.extra == {}  # the server's keys are the daemon config's own


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"maxPendingRequests": 0}, "key 'maxPendingRequests': must be greater than 0, got 0"),
        ({"maxActiveRequests": -1}, "key 'maxActiveRequests': must be greater than 0, got -1"),
        ({"requestHeaderTimeoutSeconds": 0}, "must be greater than 0, got 0.0"),
        ({"requestTimeoutSeconds": "1"}, "key 'requestTimeoutSeconds': expected a number"),
        ({"maxPendingRequestsPerContainer": 1.5}, "expected an integer"),
    ],
)
def test_bad_server_limits_stop_start_up(raw: dict[str, object], problem: str) -> None:
    text = str(config_error(raw))
    assert text.startswith("daemon config test.json: ") and problem in text
    with pytest.raises(ConfigError, match=f"^daemon config: .*{problem}"):
        decode_daemon_config(raw)  # the server's fallback when given no DaemonConfig


def test_plugin_timeout_accepts_integer() -> None:
    config, _ = parse({"pluginTimeoutSeconds": 5})
    assert config.plugin_timeout == 5.0
    assert isinstance(config.plugin_timeout, float)


def test_socket_path_and_auto() -> None:
    config, _ = parse({})
    assert config.socket_path == "/run/multus/multus.sock"
    assert config.is_auto
    config, _ = parse({"socketDir": "/tmp/x", "multusConfigFile": "/etc/multus.conf"})
    assert config.socket_path == "/tmp/x/multus.sock"
    assert not config.is_auto


def test_not_json() -> None:
    with pytest.raises(ConfigError) as info:
        parse_daemon_config(b"{nope", "f.json")
    assert str(info.value).startswith("daemon config f.json: not valid JSON: ")
    assert info.value.exit_code == 1
    with pytest.raises(ConfigError, match="not valid JSON"):
        parse_daemon_config(b"\xff\xfe", "f.json")


@pytest.mark.parametrize("data", [b"[]", b"null", b'"x"', b"3"])
def test_not_an_object(data: bytes) -> None:
    with pytest.raises(ConfigError) as info:
        parse_daemon_config(data, "f.json")
    assert str(info.value) == "daemon config f.json: expected a JSON object"


def test_load_from_file(tmp_path: Path) -> None:
    path = tmp_path / "daemon-config.json"
    data = b'{"chrootDir": "/hostroot", "extra": true}'
    path.write_bytes(data)
    config, raw, read = load_daemon_config(str(path))
    assert config.chroot_dir == "/hostroot"
    assert raw == {"chrootDir": "/hostroot", "extra": True}
    assert read == data


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    with pytest.raises(ConfigError) as info:
        load_daemon_config(str(path))
    assert str(info.value) == f"daemon config {path}: No such file or directory"
    assert info.value.exit_code == 1


def test_unreadable_file_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_daemon_config(str(tmp_path))
    assert str(info.value) == f"daemon config {tmp_path}: Is a directory"


def test_relative_path_reported_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.json").write_bytes(b"[]")
    with pytest.raises(ConfigError) as info:
        load_daemon_config("c.json")
    assert str(info.value).startswith(f"daemon config {tmp_path / 'c.json'}: ")
