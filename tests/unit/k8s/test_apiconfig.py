"""The API configuration (kubernetes_asyncio's loaders) on files written by the tests: the
kubeconfig shapes the daemon meets, precedence, in-cluster files, the token file kept in step,
and the errors a bad setup gets. Certificates come from the openssl CLI."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from multusd.errors import EXIT_SERVER, StartupError
from multusd.k8s import apiconfig
from multusd.k8s.apiconfig import load_api_config
from multusd.k8s.client import KubeClient


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


async def test_kind_shape_inline_ca_and_client_cert(tmp_path: Path, pki: dict[str, bytes]) -> None:
    path = write_kubeconfig(
        tmp_path / "kubeconfig",
        {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(pki["cert"])},
        {"client-certificate-data": b64(pki["cert"]), "client-key-data": b64(pki["key"])},
    )
    before = sorted(p.name for p in tmp_path.iterdir())
    cfg = await load_api_config(str(path), {})
    assert cfg.server == "https://127.0.0.1:6443"
    assert cfg.source == f"kubeconfig {path} (context ctx)"
    assert cfg.token is None
    async with KubeClient(cfg):  # the TLS material loads
        pass
    # persist_config is off: nothing is written beside the kubeconfig
    assert sorted(p.name for p in tmp_path.iterdir()) == before


async def test_token_file_resolves_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "token").write_text("first\n")
    path = write_kubeconfig(conf_dir / "config", {"server": "http://h:1"}, {"tokenFile": "token"})
    cfg = await load_api_config(str(path), {})
    assert cfg.token is not None and cfg.token.path == str(conf_dir / "token")
    assert cfg.configuration.api_key["BearerToken"] == "Bearer first"


async def test_the_token_file_is_read_again_when_due_or_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("one")
    path = write_kubeconfig(tmp_path / "k", {"server": "http://h:1"}, {"tokenFile": "token"})
    cfg = await load_api_config(str(path), {})
    token = cfg.token
    assert token is not None
    (tmp_path / "token").write_text("two\n")
    settings = await cfg.configuration.auth_settings()  # not due yet: the token in use
    assert settings["BearerToken"]["value"] == "Bearer one"
    assert await token.reload() is True  # asked (after a 401): read now
    assert cfg.configuration.api_key["BearerToken"] == "Bearer two"
    assert await token.reload() is False  # the same token again: nothing new
    (tmp_path / "token").write_text("three")
    monkeypatch.setattr(apiconfig, "TOKEN_RECHECK", 0.0)
    await token.reload()  # re-arms the check with the patched period
    (tmp_path / "token").write_text("four")
    settings = await cfg.configuration.auth_settings()  # due: the hook reads the file
    assert settings["BearerToken"]["value"] == "Bearer four"
    assert token.reloads == 3
    (tmp_path / "token").unlink()
    assert await token.reload() is False  # an unreadable file keeps the token in use
    assert cfg.configuration.api_key["BearerToken"] == "Bearer four"


async def test_precedence_explicit_then_env_then_incluster(
    tmp_path: Path, pki: dict[str, bytes]
) -> None:
    explicit = write_kubeconfig(tmp_path / "a", {"server": "http://explicit:1"})
    env_file = write_kubeconfig(tmp_path / "b", {"server": "http://env:1"})
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("t")
    (sa / "ca.crt").write_bytes(pki["cert"])
    env = {
        "KUBECONFIG": str(env_file),
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
    }
    assert (await load_api_config(str(explicit), env, incluster_dir=str(sa))).server == (
        "http://explicit:1"
    )
    assert (await load_api_config("", env, incluster_dir=str(sa))).server == "http://env:1"
    del env["KUBECONFIG"]
    assert (await load_api_config("", env, incluster_dir=str(sa))).source == "in-cluster"


async def test_kubeconfig_list_merges_first_wins(tmp_path: Path) -> None:
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
    cfg = await load_api_config("", env)
    assert cfg.server == "http://first-c2:1"
    assert cfg.source == f"kubeconfig {first} (context two)"


async def test_incluster(tmp_path: Path, pki: dict[str, bytes]) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(pki["cert"])
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = await load_api_config("", env, incluster_dir=str(tmp_path))
    assert cfg.server == "https://10.96.0.1:443"
    assert cfg.source == "in-cluster"
    assert cfg.configuration.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert cfg.token is not None and cfg.token.path == str(tmp_path / "token")
    assert cfg.configuration.api_key["BearerToken"] == "Bearer sa-token"
    env6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert (await load_api_config("", env6, incluster_dir=str(tmp_path))).server == (
        "https://[fd00::1]:443"
    )


async def startup_error(
    kubeconfig: str, env: dict[str, str], incluster_dir: str = "/nonexistent"
) -> str:
    with pytest.raises(StartupError) as info:
        cfg = await load_api_config(kubeconfig, env, incluster_dir=incluster_dir)
        async with KubeClient(cfg):
            pass
    assert info.value.exit_code == EXIT_SERVER
    return str(info.value)


async def test_no_configuration_at_all() -> None:
    msg = await startup_error("", {})
    assert "failed to create in-cluster kube client" in msg
    assert "KUBERNETES_SERVICE_HOST" in msg


async def test_incluster_without_token_file(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}
    assert "token file does not exist" in await startup_error("", env, str(tmp_path))


async def test_broken_kubeconfigs(tmp_path: Path, pki: dict[str, bytes]) -> None:
    assert "no kubeconfig file found" in await startup_error(str(tmp_path / "nope"), {})
    bad_yaml = tmp_path / "bad"
    bad_yaml.write_text("clusters: [")
    assert "failed to load the Kubernetes client configuration" in await startup_error(
        str(bad_yaml), {}
    )
    wrong_ctx = write_kubeconfig(tmp_path / "wc", {"server": "http://h:1"}, current="other")
    assert "other" in await startup_error(str(wrong_ctx), {})
    bad_ca = write_kubeconfig(
        tmp_path / "bc", {"server": "https://h:1", "certificate-authority-data": b64(b"junk")}
    )
    assert "bad TLS material" in await startup_error(str(bad_ca), {})
    mismatched = write_kubeconfig(
        tmp_path / "mm",
        {"server": "https://h:1"},
        {"client-certificate-data": b64(pki["cert"]), "client-key-data": b64(b"not a key")},
    )
    assert "bad TLS material" in await startup_error(str(mismatched), {})
