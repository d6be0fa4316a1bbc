"""Issue 13, item 9, through the real shim, daemon and plugins: GC collects Multus' own delegate
caches, a DEL with neither a cache nor a pod still frees the cluster network without asking the
API server, and STATUS answers code 50 at once when the daemon is not there."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from multusd.kubesim import KubeSim
from tests.e2e.conftest import pod_env, shim_config
from tests.e2e.harness import PLUGIN_DIR, Daemon, addresses, run_shim, short_id
from tests.e2e.kube import create_pod, readyz, start_kube, uid_env

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
NODE_ENV = {"CNI_PATH": PLUGIN_DIR}


def _leases(workdir: Path) -> dict[str, str]:
    """host-local's reservations of the test network: ``{ip: container ID}``."""
    directory = workdir / "ipam" / "testnet"
    out: dict[str, str] = {}
    for path in directory.iterdir() if directory.is_dir() else ():
        try:
            ipaddress.ip_address(path.name)
        except ValueError:
            continue  # lock, last_reserved_ip.0
        out[path.name] = path.read_text().split()[0]
    return out


# --- GC: Multus' own caches -------------------------------------------------------------------


async def test_gc_collects_the_multus_caches_of_containers_no_longer_listed(
    start_daemon: StartDaemon,
    netns: MakeNetns,
    shim_path: Path,
    conflist_file: Path,
    workdir: Path,
) -> None:
    """Upstream #1488: one ``<cniDir>/<containerID>`` file per sandbox ever created piles up.

    A GC with the runtime's list removes the delegate cache of every container not on it (the
    cache is per container, whatever the interface), and only regular files directly in
    ``cniDir``: a symlink named like a container is not followed (its target lives on), a
    directory is left alone, names that are no container ID (temp files) are not ours.
    """
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    keep_ns, stale_ns = await netns(), await netns()
    keep, stale = pod_env(keep_ns, pod="keep"), pod_env(stale_ns, pod="stale")
    for env in (keep, stale):
        assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    cni_dir = daemon.cni_dir
    assert (cni_dir / keep["CNI_CONTAINERID"]).is_file()
    assert (cni_dir / stale["CNI_CONTAINERID"]).is_file()
    orphans = [f"orphan{short_id()}" for _ in range(3)]  # sandboxes long gone, DEL never came
    for orphan in orphans:
        (cni_dir / orphan).write_text("[]")
    listed = f"listed{short_id()}"  # on the runtime's list with another interface name
    (cni_dir / listed).write_text("[]")
    victim = workdir / "victim"
    victim.write_text("not Multus'")
    (cni_dir / "linked1").symlink_to(victim)
    (cni_dir / "dir1").mkdir()
    (cni_dir / "dir1" / "inside").write_text("x")
    (cni_dir / ".tmp-write").write_text("x")

    valid = [
        {"containerID": keep["CNI_CONTAINERID"], "ifname": "eth0"},
        {"containerID": listed, "ifname": "net1"},
    ]
    config = {**shim_config(daemon, "1.1.0"), "cni.dev/valid-attachments": valid}
    run = await run_shim(shim_path, "GC", config, env=NODE_ENV)
    assert (run.returncode, run.stdout) == (0, ""), run

    left = {p.name for p in cni_dir.iterdir()}
    assert left == {keep["CNI_CONTAINERID"], listed, "results", "linked1", "dir1", ".tmp-write"}
    assert victim.read_text() == "not Multus'"
    assert (cni_dir / "dir1" / "inside").is_file()
    assert "eth0" not in await addresses(stale_ns)  # the cluster network's GC, as before
    assert set(_leases(workdir).values()) == {keep["CNI_CONTAINERID"]}
    assert "removed 4 stale delegate caches" in daemon.log()
    # The kept container still deletes normally from its cache.
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=keep)).returncode == 0
    assert not (cni_dir / keep["CNI_CONTAINERID"]).exists()
    assert _leases(workdir) == {}


async def test_gc_with_an_empty_runtime_list_collects_every_multus_cache(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    name = await netns()
    env = pod_env(name)
    assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    config = {**shim_config(daemon, "1.1.0"), "cni.dev/valid-attachments": []}
    run = await run_shim(shim_path, "GC", config, env=NODE_ENV)
    assert (run.returncode, run.stdout) == (0, ""), run
    assert {p.name for p in daemon.cni_dir.iterdir()} == {"results"}
    assert "eth0" not in await addresses(name)


async def test_gc_without_a_runtime_list_keeps_the_multus_caches(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    """Without the runtime's word nothing is known to be stale (upstream's fallback)."""
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    env = pod_env(await netns())
    assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    (daemon.cni_dir / "orphan1").write_text("[]")
    run = await run_shim(shim_path, "GC", shim_config(daemon, "1.1.0"), env=NODE_ENV)
    assert (run.returncode, run.stdout) == (0, ""), run
    assert {p.name for p in daemon.cni_dir.iterdir()} == {
        env["CNI_CONTAINERID"],
        "orphan1",
        "results",
    }
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0


async def test_gc_before_any_pod_has_nothing_to_collect(
    start_daemon: StartDaemon, shim_path: Path, conflist_file: Path
) -> None:
    """A fresh node: no ``cniDir`` yet. Nothing to collect is not an error."""
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    assert not daemon.cni_dir.exists()
    config = {**shim_config(daemon, "1.1.0"), "cni.dev/valid-attachments": []}
    run = await run_shim(shim_path, "GC", config, env=NODE_ENV)
    assert (run.returncode, run.stdout) == (0, ""), run
    assert not daemon.cni_dir.exists()


# --- DEL with neither a cache nor a pod -------------------------------------------------------


async def _start_kube(
    start_daemon: StartDaemon, kubesim: KubeSim, workdir: Path, conflist: Path
) -> Daemon:
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist)
    assert await readyz(daemon) == (200, "caches synced")
    return daemon


async def test_del_without_cache_or_pod_frees_the_cluster_network_from_the_cache_alone(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    """Upstream #1498: the pod was deleted and the delegate cache is gone (a node restart).

    The DEL reads the synced pod cache once, asks the API server nothing, runs the cluster
    network's DEL (so its address is released; upstream returns without deleting anything)
    and succeeds.
    """
    uid = create_pod(kubesim, "web")
    daemon = await _start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "web", uid)
    assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    assert set(_leases(workdir).values()) == {env["CNI_CONTAINERID"]}

    assert await daemon.stop() == 0
    kubesim.delete("pods", "default", "web", group="", version="v1")
    (daemon.cni_dir / env["CNI_CONTAINERID"]).unlink()
    daemon = await _start_kube(start_daemon, kubesim, workdir, conflist_file)
    kubesim.stats.reset()

    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert (deleted.returncode, deleted.stdout) == (0, ""), deleted
    assert kubesim.stats.count("get") == 0  # no fallback GET of the pod (nor of anything)
    assert _leases(workdir) == {}
    assert "eth0" not in await addresses(name)
    assert "no delegate cache and no pod" in daemon.log()
    # The runtime's second DEL (RemovePodSandbox, no netns any more) succeeds too.
    again = await run_shim(shim_path, "DEL", shim_config(daemon), env={**env, "CNI_NETNS": ""})
    assert again.returncode == 0, again


async def test_del_without_cache_and_without_kubernetes_frees_the_cluster_network(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path, workdir: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    name = await netns()
    env = pod_env(name)
    assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    (daemon.cni_dir / env["CNI_CONTAINERID"]).unlink()
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert (deleted.returncode, deleted.stdout) == (0, ""), deleted
    assert _leases(workdir) == {}
    assert "eth0" not in await addresses(name)


# --- STATUS with the daemon unavailable -------------------------------------------------------


async def test_status_is_code_50_while_the_daemon_is_down_and_0_once_it_is_up(
    start_daemon: StartDaemon, shim_path: Path, conflist_file: Path
) -> None:
    """containerd acts on 50 (the node's network is not ready); no waiting for the daemon.

    No test-only readiness override is set: a shim that still waited for ``/readyz`` would
    wait its full minute and then answer 999.
    """
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    config: dict[str, Any] = shim_config(daemon, "1.1.0")
    up = await run_shim(shim_path, "STATUS", config, env=NODE_ENV)
    assert (up.returncode, up.stdout) == (0, ""), up

    assert await daemon.stop() == 0
    assert not os.path.exists(daemon.socket_path)
    down = await run_shim(shim_path, "STATUS", config, env=NODE_ENV)
    assert down.returncode == 1
    assert down.json() == {
        "code": 50,
        "msg": "CmdStatus (shim): daemon not reachable: failed to send CNI request: "
        f'Post "http://dummy/readyz": dial unix {daemon.socket_path}: connect: '
        "no such file or directory",
    }

    await daemon.start()
    again = await run_shim(shim_path, "STATUS", config, env=NODE_ENV)
    assert (again.returncode, again.stdout) == (0, ""), again
