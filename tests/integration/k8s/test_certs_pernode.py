"""Per-node certificates against the API emulator (TLS; its CA signs approved requests): the first
certificate asked for with the bootstrap credentials and approved by the cert approver, the
clients presenting it alone, renewals made with it and reaching a running client without
cutting its watch, a restart that reuses the certificate on disk, upstream's errors, and
``multusd cert-approver`` as a process."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from multusd.errors import EXIT_SERVER, StartupError
from multusd.k8s.apiconfig import load_api_config
from multusd.k8s.certs import pernode
from multusd.k8s.certs.approver import CertApprover
from multusd.k8s.certs.config import PerNodeSettings
from multusd.k8s.certs.pernode import per_node_api_config
from multusd.k8s.client import KubeClient
from multusd.kubesim import KubeSim, Settings
from tests.waits import eventually

NODE = "node-a"
BOOT_TOKEN = "bootstrap-token-node-a"
PODS = "/api/v1/namespaces/default/pods"
# Certificates of seconds: the emulator lets a request ask for 10 s and backdates by 1 s.
SHORT = Settings(bookmark_interval=0.3, csr_min_expiration_seconds=5, csr_backdate_seconds=1.0)


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    async with KubeSim(SHORT, tls_enabled=True) as kubesim:
        kubesim.add_token(BOOT_TOKEN, f"system:node:{NODE}", ("system:nodes",))
        yield kubesim


@pytest.fixture
async def approver(sim: KubeSim, short_tmp: Path) -> AsyncIterator[CertApprover]:
    """The cert approver, as the emulator's admin, running beside the test."""
    config = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "admin")), {})
    async with KubeClient(config) as client:
        running = CertApprover(client)
        task = asyncio.create_task(running.run())
        await eventually(running.store.synced.is_set, 10)
        try:
            yield running
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def settings_for(sim: KubeSim, tmp: Path, seconds: int = 10) -> PerNodeSettings:
    boot = await sim.write_kubeconfig_for(tmp / "bootstrap.kubeconfig", BOOT_TOKEN)
    return PerNodeSettings(NODE, str(boot), str(tmp / "certs"), seconds * 10**9)


def users(sim: KubeSim, resource: str) -> set[str]:
    return {r.user for r in sim.stats.requests() if r.resource == resource}


def pod(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE}}  # fmt: skip


async def test_first_certificate_then_the_node_alone(
    sim: KubeSim, approver: CertApprover, short_tmp: Path
) -> None:
    settings = await settings_for(sim, short_tmp, seconds=600)
    failures: list[str] = []
    async with per_node_api_config(settings, on_failure=failures.append) as config:
        assert config.configuration.api_key == {}  # no token: the certificate alone
        async with KubeClient(config) as client:
            await client.get(PODS)
    assert failures == []
    # Asked for by the kubelet's identity, approved by the approver, used by the node.
    (create,) = [r for r in sim.stats.requests() if r.verb == "create"
                 and r.resource == "certificatesigningrequests"]  # fmt: skip
    assert create.user == f"system:node:{NODE}"
    assert users(sim, "pods") == {f"system:multus:{NODE}"}
    assert approver.approved == 1
    (csr,) = sim.store.iter_entries(sim.state.registry.by_path(
        "certificates.k8s.io", "v1", "certificatesigningrequests"))  # type: ignore[arg-type]  # fmt: skip
    spec = csr.decode()["spec"]
    assert (spec["expirationSeconds"], spec["usages"], spec["signerName"]) == (
        600,
        ["digital signature", "client auth"],
        "kubernetes.io/kube-apiserver-client",
    )
    current = short_tmp / "certs" / "multus-client-current.pem"
    assert current.is_symlink()
    assert stat.S_IMODE(current.stat().st_mode) == 0o600


async def test_renewal_reaches_a_running_client_and_keeps_its_watch(
    sim: KubeSim, approver: CertApprover, short_tmp: Path
) -> None:
    settings = await settings_for(sim, short_tmp, seconds=8)
    sim.create(pod("p0"))
    async with per_node_api_config(settings, on_failure=pytest.fail) as config:
        assert config.certificate is not None
        async with KubeClient(config) as client:
            listed = await client.get(PODS)
            params = {"resourceVersion": listed["metadata"]["resourceVersion"],
                      "allowWatchBookmarks": "true", "timeoutSeconds": "60"}  # fmt: skip
            seen: list[str] = []
            async with client.watch(PODS, params) as events:

                async def read() -> None:
                    async for event in events:
                        if event["type"] == "ADDED":
                            seen.append(event["object"]["metadata"]["name"])

                reader = asyncio.create_task(read())
                swaps = config.certificate.swaps  # type: ignore[attr-defined]
                # Two renewals (each 70-90 % of ~9 s) while requests go on and the watch reads.
                deadline = asyncio.get_running_loop().time() + 40
                index = 1
                while config.certificate.swaps < swaps + 2:  # type: ignore[attr-defined]
                    assert asyncio.get_running_loop().time() < deadline, "no renewal"
                    sim.create(pod(f"p{index}"))
                    await client.get(PODS)
                    index += 1
                    await asyncio.sleep(0.5)
                await eventually(lambda: len(seen) == index - 1, 10)
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
    assert seen == [f"p{i}" for i in range(1, index)]  # one watch, every event: no reconnect
    watches = [r for r in sim.stats.requests() if r.verb == "watch" and r.resource == "pods"]
    assert len(watches) == 1
    renewals = [r for r in sim.stats.requests() if r.verb == "create"
                and r.resource == "certificatesigningrequests"]  # fmt: skip
    assert [r.user for r in renewals[:2]] == [f"system:node:{NODE}", f"system:multus:{NODE}"]
    assert sim.stats.count_code(401) == 0
    assert users(sim, "pods") == {f"system:multus:{NODE}"}


async def test_a_restart_reuses_the_certificate_on_disk(
    sim: KubeSim, approver: CertApprover, short_tmp: Path
) -> None:
    settings = await settings_for(sim, short_tmp, seconds=600)
    async with per_node_api_config(settings, on_failure=pytest.fail):
        pass
    first = os.readlink(short_tmp / "certs" / "multus-client-current.pem")
    async with (
        per_node_api_config(settings, on_failure=pytest.fail) as config,
        KubeClient(config) as client,
    ):
        await client.get(PODS)
    assert os.readlink(short_tmp / "certs" / "multus-client-current.pem") == first
    assert sim.stats.count("create", "certificatesigningrequests") == 1


async def test_nobody_approves(
    sim: KubeSim, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pernode, "FIRST_CERTIFICATE_WAIT", 1.0)
    settings = await settings_for(sim, short_tmp)
    with pytest.raises(StartupError) as info:
        async with per_node_api_config(settings, on_failure=pytest.fail):
            pass
    assert info.value.exit_code == EXIT_SERVER
    certs = short_tmp / "certs"
    assert str(info.value) == (
        "error getting perNodeClient: certificate was not signed, last cert store err: no "
        f'cert/key files read at "{certs}/multus-client-current.pem", ("", "") or ("{certs}", '
        f'"{certs}") err: timed out waiting for the condition'
    )


async def test_a_bootstrap_kubeconfig_that_does_not_load(short_tmp: Path) -> None:
    settings = PerNodeSettings(NODE, str(short_tmp / "missing"), str(short_tmp / "c"), 10**12)
    with pytest.raises(StartupError) as info:
        async with per_node_api_config(settings, on_failure=pytest.fail):
            pass
    assert str(info.value).startswith(
        f"error getting perNodeClient: failed to load bootstrap kubeconfig {short_tmp}/missing: "
    )


async def test_cert_approver_command(sim: KubeSim, short_tmp: Path) -> None:
    admin = await sim.write_kubeconfig(short_tmp / "admin")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "multusd", "cert-approver", "--kubeconfig", str(admin),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        settings = await settings_for(sim, short_tmp, seconds=600)
        async with per_node_api_config(settings, on_failure=pytest.fail):
            pass
        (event,) = [r for r in sim.stats.requests() if r.resource == "events"]
        assert (event.verb, event.namespace, event.user) == ("create", "default", "kubesim-admin")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    text = err.decode()
    assert "cert approver synced and ready" in text
    assert "(1 approved, 0 left alone, 0 dropped)" in text
