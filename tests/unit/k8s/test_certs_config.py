"""``perNodeCertificate`` checked as upstream's ``NewCNIServer`` checks it: the order, the texts,
the exit code (3), and nothing read while it is not enabled."""

from __future__ import annotations

import subprocess
import sys

import pytest

from multusd.config.daemon import decode_daemon_config
from multusd.errors import EXIT_SERVER, StartupError
from multusd.k8s.certs.config import per_node_settings

NODE = {"MULTUS_NODE_NAME": "node-a"}


def settings(raw: dict[str, object], environ: dict[str, str] = NODE):  # type: ignore[no-untyped-def]
    config = decode_daemon_config({"perNodeCertificate": raw})
    return per_node_settings(config.per_node_certificate, environ)


def error_of(raw: dict[str, object], environ: dict[str, str] = NODE) -> str:
    with pytest.raises(StartupError) as info:
        settings(raw, environ)
    assert info.value.exit_code == EXIT_SERVER
    return str(info.value)


def test_absent_or_disabled_is_nothing_at_all() -> None:
    assert per_node_settings(decode_daemon_config({}).per_node_certificate, {}) is None
    # Not enabled: nothing else is looked at, not even a duration Go would refuse.
    assert settings({"certDuration": "soon"}, {}) is None
    assert settings({"enabled": False, "bootstrapKubeconfig": "/b", "certDir": "/c"}) is None


def test_enabled_and_complete() -> None:
    got = settings({"enabled": True, "bootstrapKubeconfig": "/b", "certDir": "/c"})
    assert got is not None
    assert (got.node, got.bootstrap_kubeconfig, got.cert_dir) == ("node-a", "/b", "/c")
    assert got.duration_ns == 600 * 10**9  # the default, 10m
    assert got.common_name == "system:multus:node-a"


@pytest.mark.parametrize(("text", "seconds"), [("", 600), ("1h", 3600), ("90s", 90)])
def test_cert_duration(text: str, seconds: int) -> None:
    got = settings({"enabled": True, "bootstrapKubeconfig": "/b", "certDir": "/c",
                    "certDuration": text})  # fmt: skip
    assert got is not None and got.duration_ns == seconds * 10**9


def test_incomplete_configuration_is_upstreams_error() -> None:
    assert error_of({"enabled": True, "certDir": "/var/lib/multus"}) == (
        'failed to configure PerNodeCertificate: enabled: true, BootstrapKubeconfig: "", '
        'CertDir: "/var/lib/multus"'
    )
    assert error_of({"enabled": True, "bootstrapKubeconfig": "/etc/kubernetes/kubelet.conf"}) == (
        "failed to configure PerNodeCertificate: enabled: true, BootstrapKubeconfig: "
        '"/etc/kubernetes/kubelet.conf", CertDir: ""'
    )


def test_the_configuration_is_checked_before_the_node_name() -> None:
    assert error_of({"enabled": True}, {}).startswith("failed to configure PerNodeCertificate")


def test_missing_node_name() -> None:
    assert error_of({"enabled": True, "bootstrapKubeconfig": "/b", "certDir": "/c"}, {}) == (
        "error getting node name for perNodeCertificate, please check manifest to have "
        "MULTUS_NODE_NAME"
    )


def test_unparsable_duration_after_the_node_name() -> None:
    raw = {"enabled": True, "bootstrapKubeconfig": "/b", "certDir": "/c", "certDuration": "10"}
    assert error_of(raw) == 'failed to parse certDuration: time: missing unit in duration "10"'
    assert error_of(raw, {}).startswith("error getting node name")


def test_decoding_is_go_like() -> None:
    config = decode_daemon_config(
        {"perNodeCertificate": {"ENABLED": True, "bootstrapkubeconfig": "/b", "certdir": "/c"}}
    )
    assert config.per_node_certificate is not None
    assert config.per_node_certificate.enabled
    assert config.per_node_certificate.cert_dir == "/c"
    with pytest.raises(StartupError, match=r"key 'perNodeCertificate.certDuration': expected a "
                                           r"string, got a number \(600\)"):  # fmt: skip
        decode_daemon_config({"perNodeCertificate": {"certDuration": 600}})


def test_the_daemon_imports_no_cryptography_unless_enabled() -> None:
    """``cryptography`` costs ~10 MiB: the daemon (and the emulator without TLS) load it only
    when per-node certificates are enabled (or a CA signs)."""
    code = (
        "import sys, multusd.cli, multusd.daemon, multusd.daemon_parts, multusd.kubesim.server\n"
        "assert 'cryptography' not in sys.modules, sorted(m for m in sys.modules if 'crypt' in m)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
