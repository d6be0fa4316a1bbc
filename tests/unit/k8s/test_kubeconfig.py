"""The cluster-config loader on files written by the tests: kubeconfig shapes, precedence,
in-cluster files, and the errors a bad setup gets. Certificates come from the openssl CLI."""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from multusd.errors import EXIT_SERVER, StartupError
from multusd.k8s.kubeconfig import ClusterConfig, load_cluster_config


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A self-signed EC certificate and its key (also usable as a CA)."""
    d = tmp_path_factory.mktemp("pki")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-days", "2",
         "-subj", "/CN=test-user"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return {"cert": (d / "cert.pem").read_bytes(), "key": (d / "key.pem").read_bytes()}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_kubeconfig(
    path: Path,
    cluster: dict[str, object],
    user: dict[str, object] | None = None,
    *,
    current: str | None = "ctx",
    extra_contexts: list[dict[str, object]] | None = None,
) -> Path:
    doc: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [
            *(extra_contexts or []),
            {"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "ns1"}},
        ],
    }
    if current is not None:
        doc["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def test_kind_shape_inline_ca_and_client_cert(tmp_path: Path, pki: dict[str, bytes]) -> None:
    path = write_kubeconfig(
        tmp_path / "kind.yaml",
        {"server": "https://127.0.0.1:41234/", "certificate-authority-data": b64(pki["cert"])},
        {"client-certificate-data": b64(pki["cert"]), "client-key-data": b64(pki["key"])},
    )
    cfg = load_cluster_config(str(path), {})
    assert cfg.server == "https://127.0.0.1:41234"
    assert cfg.source == f"kubeconfig {path} (context ctx)"
    assert cfg.ca_data == pki["cert"]
    assert (cfg.client_cert_data, cfg.client_key_data) == (pki["cert"], pki["key"])
    assert cfg.token is None and cfg.token_file is None
    assert cfg.namespace == "ns1"
    assert not cfg.insecure


def test_client_cert_from_memory_leaves_no_file(
    tmp_path: Path, pki: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cfg = ClusterConfig(
        server="https://h:1",
        source="test",
        ca_data=pki["cert"],
        client_cert_data=pki["cert"],
        client_key_data=pki["key"],
    )
    ctx = cfg.ssl_context()
    assert ctx is not None
    assert list(scratch.iterdir()) == []


def test_files_resolve_relative_to_the_kubeconfig(tmp_path: Path, pki: dict[str, bytes]) -> None:
    conf_dir = tmp_path / "conf"
    (conf_dir / "pki").mkdir(parents=True)
    (conf_dir / "pki" / "ca.crt").write_bytes(pki["cert"])
    (conf_dir / "pki" / "user.crt").write_bytes(pki["cert"])
    (conf_dir / "pki" / "user.key").write_bytes(pki["key"])
    (conf_dir / "token").write_text("file-token\n")
    path = write_kubeconfig(
        conf_dir / "config",
        {"server": "https://10.0.0.1:6443", "certificate-authority": "pki/ca.crt"},
        {"tokenFile": "token", "client-certificate": "pki/user.crt", "client-key": "pki/user.key"},
    )
    cfg = load_cluster_config("", {"KUBECONFIG": str(path)})
    assert cfg.ca_data == pki["cert"]
    assert cfg.token == "file-token"
    assert cfg.token_file == str(conf_dir / "token")
    assert cfg.client_cert_file == str(conf_dir / "pki" / "user.crt")
    assert cfg.client_key_file == str(conf_dir / "pki" / "user.key")
    assert cfg.ssl_context() is not None


def test_plain_http_token_and_first_context_when_none_current(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "k",
        {"server": "http://127.0.0.1:8080"},
        {"token": "abc"},
        current=None,
        extra_contexts=[{"name": "first", "context": {"cluster": "c", "user": "u"}}],
    )
    cfg = load_cluster_config(str(path), {})
    assert cfg.source.endswith("(context first)")
    assert cfg.token == "abc"
    assert cfg.namespace is None
    assert cfg.ssl_context() is None


def test_insecure_skip_verify(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "k", {"server": "https://h:6443", "insecure-skip-tls-verify": True}
    )
    cfg = load_cluster_config(str(path), {})
    assert cfg.insecure
    ctx = cfg.ssl_context()
    assert ctx is not None and not ctx.check_hostname


def test_precedence_explicit_then_env_then_incluster(tmp_path: Path) -> None:
    explicit = write_kubeconfig(tmp_path / "a", {"server": "http://explicit:1"})
    env_file = write_kubeconfig(tmp_path / "b", {"server": "http://env:1"})
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("t")
    (sa / "ca.crt").write_text("")
    env = {
        "KUBECONFIG": str(env_file),
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
    }
    assert load_cluster_config(str(explicit), env, incluster_dir=str(sa)).server == (
        "http://explicit:1"
    )
    assert load_cluster_config("", env, incluster_dir=str(sa)).server == "http://env:1"


def test_kubeconfig_list_merges_first_wins(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.write_text(
        yaml.safe_dump(
            {
                "current-context": "two",
                "clusters": [{"name": "c2", "cluster": {"server": "http://first-c2:1"}}],
            }
        )
    )
    second = write_kubeconfig(tmp_path / "second", {"server": "http://second-c:1"})
    doc = yaml.safe_load(second.read_text())
    doc["contexts"].append({"name": "two", "context": {"cluster": "c2", "user": "u"}})
    doc["clusters"].append({"name": "c2", "cluster": {"server": "http://second-c2:1"}})
    second.write_text(yaml.safe_dump(doc))
    missing = tmp_path / "missing"
    env = {"KUBECONFIG": os.pathsep.join([str(missing), str(first), str(second)])}
    cfg = load_cluster_config("", env)
    assert cfg.server == "http://first-c2:1"
    assert cfg.source == f"kubeconfig {first} (context two)"


def test_incluster(tmp_path: Path, pki: dict[str, bytes]) -> None:
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_bytes(pki["cert"])
    (tmp_path / "namespace").write_text("kube-system")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = load_cluster_config("", env, incluster_dir=str(tmp_path))
    assert cfg == ClusterConfig(
        server="https://10.96.0.1:443",
        source="in-cluster",
        ca_data=pki["cert"],
        token="sa-token",
        token_file=str(tmp_path / "token"),
        namespace="kube-system",
    )
    env6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert load_cluster_config("", env6, incluster_dir=str(tmp_path)).server == (
        "https://[fd00::1]:443"
    )


def startup_error(kubeconfig: str, env: dict[str, str], incluster_dir: str = "/nonexistent") -> str:
    with pytest.raises(StartupError) as info:
        load_cluster_config(kubeconfig, env, incluster_dir=incluster_dir)
    assert info.value.exit_code == EXIT_SERVER
    return str(info.value)


def test_no_configuration_at_all() -> None:
    msg = startup_error("", {})
    assert "failed to create in-cluster kube client" in msg
    assert "KUBERNETES_SERVICE_HOST" in msg


def test_incluster_without_token_file(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}
    assert "service-account token" in startup_error("", env, str(tmp_path))


@pytest.mark.parametrize("method", ["exec", "auth-provider"])
def test_unsupported_user_methods_are_named(tmp_path: Path, method: str) -> None:
    path = write_kubeconfig(tmp_path / "k", {"server": "https://h:1"}, {method: {"command": "x"}})
    msg = startup_error(str(path), {})
    assert repr(method) in msg
    assert "does not support" in msg


def test_basic_auth_refused(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "k", {"server": "https://h:1"}, {"username": "a", "password": "b"}
    )
    assert "basic auth" in startup_error(str(path), {})


def test_broken_kubeconfigs(tmp_path: Path, pki: dict[str, bytes]) -> None:
    assert "cannot read kubeconfig" in startup_error(str(tmp_path / "nope"), {})
    bad_yaml = tmp_path / "bad"
    bad_yaml.write_text("clusters: [")
    assert "not valid YAML" in startup_error(str(bad_yaml), {})
    no_server = write_kubeconfig(tmp_path / "ns", {})
    assert "no http(s) server URL" in startup_error(str(no_server), {})
    wrong_ctx = write_kubeconfig(tmp_path / "wc", {"server": "http://h:1"}, current="other")
    assert "'other' is not defined" in startup_error(str(wrong_ctx), {})
    half_cert = write_kubeconfig(
        tmp_path / "hc", {"server": "https://h:1"}, {"client-certificate-data": b64(pki["cert"])}
    )
    assert "without a key" in startup_error(str(half_cert), {})
    bad_ca = write_kubeconfig(
        tmp_path / "bc", {"server": "https://h:1", "certificate-authority-data": b64(b"junk")}
    )
    assert "bad TLS material" in startup_error(str(bad_ca), {})
    mismatched = write_kubeconfig(
        tmp_path / "mm",
        {"server": "https://h:1"},
        {"client-certificate-data": b64(pki["cert"]), "client-key-data": b64(b"not a key")},
    )
    assert "bad TLS material" in startup_error(str(mismatched), {})
