"""TLS mode: clients verify the generated CA; in-cluster files work with the in-cluster loader."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from multusd.kubesim import KubeSim


async def test_kubeconfig_with_ca(kubesim_tls: KubeSim, short_tmp: Path):
    path = await kubesim_tls.write_kubeconfig(short_tmp / "kubeconfig")
    assert kubesim_tls.url.startswith("https://")
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=cfg)
    assert cfg.verify_ssl
    async with client.ApiClient(cfg) as api:
        v1 = client.CoreV1Api(api)
        namespaces = await v1.list_namespace()
    assert "default" in [n.metadata.name for n in namespaces.items]
    assert kubesim_tls.stats.count("list", "namespaces") == 1


async def test_wrong_ca_is_rejected(kubesim_tls: KubeSim, short_tmp: Path):
    # A kubeconfig carrying a CA that did not sign the server's certificate.
    async with KubeSim(tls_enabled=True) as other:
        path = await kubesim_tls.write_kubeconfig(short_tmp / "kubeconfig")
        text = path.read_text()
        assert kubesim_tls.ca_pem and other.ca_pem
        path.write_text(
            text.replace(
                base64.b64encode(kubesim_tls.ca_pem).decode(),
                base64.b64encode(other.ca_pem).decode(),
            )
        )
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(path), client_configuration=cfg)
        async with client.ApiClient(cfg) as api:
            with pytest.raises(Exception) as err:
                await client.CoreV1Api(api).list_namespace()
    assert isinstance(err.value.__cause__ or err.value, ssl.SSLError | OSError)


async def test_incluster_files(kubesim_tls: KubeSim, short_tmp: Path, monkeypatch):
    sa = await kubesim_tls.write_incluster(short_tmp / "sa", namespace="kube-system")
    assert (sa / "namespace").read_text() == "kube-system"
    assert (sa / "token").read_text() == kubesim_tls.token
    assert (sa / "ca.crt").read_bytes() == kubesim_tls.ca_pem
    for key, value in kubesim_tls.incluster_env().items():
        monkeypatch.setenv(key, value)
    cfg = client.Configuration()
    loader = config.incluster_config.InClusterConfigLoader(
        token_filename=str(sa / "token"), cert_filename=str(sa / "ca.crt")
    )
    loader.load_and_set(cfg)
    async with client.ApiClient(cfg) as api:
        pods = await client.CoreV1Api(api).list_namespaced_pod("kube-system")
    assert pods.items == []


async def test_kubectl_over_tls(kubesim_tls: KubeSim, short_tmp: Path, kubectl: Any):
    path = await kubesim_tls.write_kubeconfig(short_tmp / "kubeconfig")
    rc, out, err = await kubectl(path, "get", "namespaces", "-o", "name")
    assert rc == 0, err
    assert "namespace/default" in out.split()
