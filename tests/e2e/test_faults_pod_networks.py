"""A pod that asks for more networks than anyone uses, and a delegate cache that lists more than
this daemon's ADD could have written: the ADD is refused before anything runs, and every DEL
runs at most what an ADD could have cached (``maxNetworksPerPod``), so the runtime can always
stop the sandbox. Real shim, daemon, plugins and namespaces; the API emulator."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest_asyncio

from multusd.commands import scratch
from multusd.kubesim import KubeSim
from multusd.networks.delegates import delegate_from_bytes
from tests.e2e.conftest import bridge_plugin, pod_env, shim_config
from tests.e2e.harness import Daemon, addresses, ip, run_shim
from tests.e2e.kube import create_pod, start_kube, uid_env

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
NETWORKS = "k8s.v1.cni.cncf.io/networks"


@pytest_asyncio.fixture
async def extra_bridge(kubesim: KubeSim, workdir: Path, bridge_name: str) -> AsyncIterator[str]:
    """A NAD ``extra``: a second bridge with its own host-local range."""
    name = f"{bridge_name}e"[:15]
    config = {"cniVersion": "1.0.0", **bridge_plugin(name, workdir, subnet="10.251.40.0/24")}
    kubesim.create(
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "extra", "namespace": "default"},
            "spec": {"config": json.dumps(config)},
        }
    )
    yield name
    await ip("link", "del", name, check=False)


def _allocations(workdir: Path) -> list[str]:
    """The addresses host-local holds, every range (its lock and last-reserved files aside)."""
    ipam = workdir / "ipam"
    if not ipam.exists():
        return []
    return sorted(
        p.name for p in ipam.rglob("*") if p.is_file() and p.name[0].isdigit()
    )  # fmt: skip


async def test_a_pod_asking_for_43690_networks_is_refused_before_anything_runs(
    start_daemon: StartDaemon, kubesim: KubeSim, netns: MakeNetns, shim_path: Path,
    workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    # The largest text annotation under the API server's 256 KiB: one NAD named 43,690 times.
    uid = create_pod(kubesim, "greedy", **{NETWORKS: ",".join(["n"] * 43_690)})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "greedy", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode != 0
    error = json.loads(added.stdout)
    assert error["code"] == 7
    assert (
        "the pod asks for 43690 networks, more than maxNetworksPerPod (128) allows"
        in (error["msg"])
    )
    # Refused before anything was cached or run: no cache, no address, no interface.
    assert not (daemon.cni_dir / env["CNI_CONTAINERID"]).exists()
    assert _allocations(workdir) == []
    assert set(await addresses(name)) == {"lo"}
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0, deleted


async def test_a_del_runs_at_most_what_an_add_could_have_cached(
    start_daemon: StartDaemon, kubesim: KubeSim, extra_bridge: str, netns: MakeNetns,
    shim_path: Path, workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    """A cache written under a higher limit (an older daemon's, or upstream's): the DEL runs
    the cluster network and the first ``maxNetworksPerPod`` of the pod's, logs the rest, and
    succeeds."""
    uid = create_pod(kubesim, "three", **{NETWORKS: "extra,extra,extra"})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "three", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    assert set(await addresses(name)) == {"lo", "eth0", "net1", "net2", "net3"}
    await daemon.stop()
    lowered = await start_kube(start_daemon, kubesim, workdir, conflist_file, maxNetworksPerPod=1)
    deleted = await run_shim(shim_path, "DEL", shim_config(lowered), env=env)
    assert deleted.returncode == 0, deleted
    # The cluster network and net1 deleted; net2 and net3 skipped (the runtime's GC's now).
    assert set(await addresses(name)) == {"lo", "net2", "net3"}
    assert not (lowered.cni_dir / env["CNI_CONTAINERID"]).exists()
    assert "lists 4 delegates, more than this daemon's ADD can cache (2" in lowered.log()


async def test_a_del_of_a_cache_listing_thousands_of_delegates_runs_the_bound(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path,
    conflist_file: Path,
) -> None:  # fmt: skip
    """Without the bound this DEL would run 5,000 plugin DELs; with ``maxNetworksPerPod`` 4 it
    runs 5 (the cluster network, then 4) and answers."""
    daemon = await start_daemon(clusterNetwork=str(conflist_file), maxNetworksPerPod=4)
    env = pod_env(await netns())
    delegate = delegate_from_bytes(conflist_file.read_bytes())
    await scratch.save(str(daemon.cni_dir), env["CNI_CONTAINERID"], [delegate] * 5_000)
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0, deleted
    assert "lists 5000 delegates" in daemon.log() and "skipping 4995" in daemon.log()
    assert not (daemon.cni_dir / env["CNI_CONTAINERID"]).exists()
