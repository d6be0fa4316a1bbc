"""The daemon on its node's own certificate (``perNodeCertificate``), against the API emulator in
TLS mode with ``multusd cert-approver`` running beside it: the first certificate asked for with a
kubelet-like bootstrap token, every later request made as ``system:multus:<node>`` alone, and
renewals in the middle of bursts of ADDs and DELs that fail none of them, cut no watch and cost no
relist. Certificates of 12 seconds (the emulator lets a test go below Kubernetes' 10 minutes and
backdates by 1 s), so a renewal comes every 8-11 s. Real shim, real plugins."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest_asyncio

from multusd.kubesim import KubeSim, Settings
from tests.e2e.conftest import daemon_config, shim_config
from tests.e2e.harness import Daemon, run_shim, until_logged
from tests.e2e.kube import NODE, create_pod, readyz, uid_env
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
BOOT_TOKEN = "bootstrap-token-e2e"
NODE_USER = f"system:multus:{NODE}"
CSRS = "certificatesigningrequests"
BURST = 8


@pytest_asyncio.fixture
async def kubesim() -> AsyncIterator[KubeSim]:
    settings = Settings(bookmark_interval=1.0, csr_min_expiration_seconds=5, csr_backdate_seconds=1)
    async with KubeSim(settings, tls_enabled=True) as sim:
        sim.add_token(BOOT_TOKEN, f"system:node:{NODE}", ("system:nodes",))
        yield sim


@pytest_asyncio.fixture
async def approver(kubesim: KubeSim, workdir: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """``multusd cert-approver`` as the cluster runs it (here with the emulator's admin)."""
    admin = await kubesim.write_kubeconfig(workdir / "admin.kubeconfig")
    log = (workdir / "approver.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "multusd", "cert-approver", "--kubeconfig", str(admin),
        stdout=log, stderr=log,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)
        log.close()


def csr_creates(kubesim: KubeSim) -> list[str]:
    return [r.user for r in kubesim.stats.requests() if r.verb == "create" and r.resource == CSRS]


async def test_the_node_identity_alone_through_renewals_mid_burst(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    approver: asyncio.subprocess.Process,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    bootstrap = await kubesim.write_kubeconfig_for(workdir / "bootstrap.kubeconfig", BOOT_TOKEN)
    per_node = {
        "enabled": True,
        "bootstrapKubeconfig": str(bootstrap),
        "certDir": str(workdir / "certs"),
        "certDuration": "12s",
    }
    pods = [f"web-{i}" for i in range(BURST)]
    uids = {name: create_pod(kubesim, name) for name in pods}
    namespaces = {name: await netns() for name in pods}
    daemon = await start_daemon(
        env={"MULTUS_NODE_NAME": NODE},
        clusterNetwork=str(conflist_file),
        perNodeCertificate=per_node,
    )
    await eventually(lambda: readyz_ok(daemon), 60)
    assert "certificate found: talking to the API server as system:multus:node-e2e" in daemon.log()
    assert csr_creates(kubesim) == [f"system:node:{NODE}"]  # the bootstrap identity asks once

    # Waves of BURST ADDs at once (then their DELs), back to back, through two renewals.
    adds, dels = [], []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 90
    while len(csr_creates(kubesim)) < 3:
        assert loop.time() < deadline, f"renewals: {csr_creates(kubesim)}"
        envs = {n: uid_env(namespaces[n], n, uids[n]) for n in pods}
        adds += await asyncio.gather(
            *(run_shim(shim_path, "ADD", shim_config(daemon), env=envs[n]) for n in pods)
        )
        dels += await asyncio.gather(
            *(run_shim(shim_path, "DEL", shim_config(daemon), env=envs[n]) for n in pods)
        )
    assert all(run.returncode == 0 for run in adds), [r for r in adds if r.returncode]
    assert all(run.returncode == 0 for run in dels), [r for r in dels if r.returncode]
    await until_logged(daemon, "API clients now present the renewed certificate")

    renewals = csr_creates(kubesim)[1:]
    assert renewals and set(renewals) == {NODE_USER}  # renewed with its own certificate
    users: dict[str, set[str]] = {}
    for record in kubesim.stats.requests():
        users.setdefault(record.resource, set()).add(record.user)
    # The daemon's reads and writes: the node, alone (the admin is the approver, beside it).
    assert users["pods"] == {NODE_USER}
    assert users["network-attachment-definitions"] == {NODE_USER}
    assert users["events"] == {NODE_USER, "kubesim-admin"}  # AddedInterface; CSRApproved
    admin = {r.resource for r in kubesim.stats.requests() if r.user == "kubesim-admin"}
    assert admin <= {CSRS, "events"}
    assert kubesim.stats.count_code(401) == 0
    # The caches never started over: one list-and-watch of pods, still open.
    assert kubesim.stats.count("watch", "pods") + kubesim.stats.count("list", "pods") == 1
    assert kubesim.stats.count("patch", "pods", "status") == len(adds)
    assert (await readyz(daemon))[0] == 200
    assert daemon.proc is not None and daemon.proc.returncode is None


async def readyz_ok(daemon: Daemon) -> bool:
    status, caches = await readyz(daemon)
    return status == 200 and caches == "caches synced"


async def test_an_incomplete_configuration_is_upstreams_startup_error(workdir: Path) -> None:
    config = daemon_config(workdir, perNodeCertificate={"enabled": True, "certDir": "/x"})
    daemon = Daemon(workdir, config, {"MULTUS_NODE_NAME": NODE})
    await daemon.start(wait=False)
    assert daemon.proc is not None
    assert await asyncio.wait_for(daemon.proc.wait(), 30) == 3
    assert (
        'failed to configure PerNodeCertificate: enabled: true, BootstrapKubeconfig: "", '
        'CertDir: "/x"'
    ) in daemon.log()
