"""Rolling restarts and uninstall through a real containerd, with OUR manifests' daemon config.

The daemon runs with the keys of ``manifests/base/configmap.yaml`` (read here, so that these
tests follow the manifests), only its node paths moved under the test's directories. As on a
node, the primary network's conflist sits in containerd's CNI ``conf_dir`` beside
``00-multus.conf`` (the manifest's ``cniConfigDir`` is its ``multusAutoconfigDir``): it is
what containerd falls back to whenever ``00-multus.conf`` is gone, which is how upstream's
restart gives pods the wrong network (#1527). The kubelet is emulated where it matters: a
failed ``RunPodSandbox`` is run again (next ``attempt``), a failed Stop or Remove again, and
sandboxes left by failed attempts are removed at the end, as its garbage collection does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
import yaml

from cni_shim import readiness
from cni_shim.errors import TRY_AGAIN_LATER
from multusd.kubesim import KubeSim
from tests.e2e.cri.conftest import CLUSTER_NETWORK, CLUSTER_SUBNET, write_cluster_conflist
from tests.e2e.cri.containerd import Containerd
from tests.e2e.cri.criapi import SANDBOX_READY, CriClient, SandboxConfig
from tests.e2e.cri.node import NETWORKS, NODE, STATUS, Node, in_subnet
from tests.e2e.harness import REPO, Daemon, run_shim
from tests.waits import eventually

CONFIGMAP = REPO / "manifests" / "base" / "configmap.yaml"
NODE_PATH_KEYS = frozenset({"chrootDir", "cniConfigDir", "multusAutoconfigDir", "socketDir"})
"""The manifest's keys that name paths on a node; every other key is applied as it is."""
NAD = "net-a"
NAD_SUBNET = "10.252.4.0/24"
PER_PHASE = 5
"""Sandboxes created, and others removed, in each phase: while the old daemon is told to stop,
and while no daemon answers at all."""
ATTEMPTS = 6  # the kubelet's tries per operation, 1 s apart (it keeps trying; a test stops)


def manifest_daemon_config() -> dict[str, Any]:
    """``daemon-config.json`` of the DaemonSet's ConfigMap."""
    [configmap] = [doc for doc in yaml.safe_load_all(CONFIGMAP.read_text()) if doc]
    return dict(json.loads(configmap["data"]["daemon-config.json"]))


def node_config(manifest: dict[str, Any], conf_dir: Path, workdir: Path) -> dict[str, Any]:
    """The manifest's daemon config on this test's "node": the same keys, its paths here.

    ``chrootDir`` is dropped (the DaemonSet's view of the host's ``/``; here the plugins run on
    the host itself), ``socketDir`` moves to the test's directory, and the runtime's conf dir
    is containerd's. ``daemonSocketDir`` says where the shim finds the socket: in the DaemonSet
    the shim's default ``/run/multus/`` is the host's view of ``/host/run/multus/``.
    """
    paths = {key for key, value in manifest.items() if isinstance(value, str) and "/" in value}
    assert paths <= NODE_PATH_KEYS, f"place these node paths in the test first: {paths}"
    config = {key: value for key, value in manifest.items() if key not in NODE_PATH_KEYS}
    same_dir = manifest["cniConfigDir"].rstrip("/") == manifest["multusAutoconfigDir"].rstrip("/")
    config["cniConfigDir"] = str(conf_dir)
    config["multusAutoconfigDir"] = str(conf_dir if same_dir else workdir / "auto")
    config["socketDir"] = config["daemonSocketDir"] = str(workdir / "run")
    return config


@pytest_asyncio.fixture
async def node(
    containerd: Containerd,
    kubesim: KubeSim,
    start_daemon: Callable[..., Awaitable[Daemon]],
    workdir: Path,
    bridge_name: str,
    extra_bridges: Callable[[str], str],
) -> AsyncIterator[Node]:
    """A node whose daemon runs with the manifests' config, and one bridge NAD."""
    config = node_config(manifest_daemon_config(), containerd.conf_dir, workdir)
    primary = write_cluster_conflist(Path(config["multusAutoconfigDir"]), bridge_name, workdir)
    try:
        kubeconfig = await kubesim.write_kubeconfig(workdir / "kubeconfig")
        daemon = await start_daemon(
            env={"MULTUS_NODE_NAME": NODE}, kubeconfig=str(kubeconfig), **config
        )
        async with CriClient(containerd.socket) as cri:
            node = Node(containerd, cri, kubesim, daemon, workdir, primary)
            node.bridge_nad(NAD, extra_bridges("a"), NAD_SUBNET)
            await node.wait_config_loaded()
            try:
                yield node
            finally:
                await _leave_nothing(node)
    finally:
        # The other tests of the module get their own daemon, which writes its own file.
        primary.unlink(missing_ok=True)


async def _leave_nothing(node: Node) -> None:
    """A failed test's sandboxes, with a daemon to answer their DELs."""
    sandboxes = await node.cri.list()
    if not sandboxes:
        return
    assert node.daemon.proc is not None
    if node.daemon.proc.returncode is not None:
        await node.daemon.start()
    for sandbox in sandboxes:
        with contextlib.suppress(grpc.RpcError):
            await remove(node, sandbox.id)


async def create(node: Node, name: str, failures: list[str], **annotations: str) -> str:
    """The kubelet's pod start: the pod object, then ``RunPodSandbox`` until it succeeds."""
    uid = node.create_pod(name, **annotations)
    for attempt in range(ATTEMPTS):
        config = SandboxConfig(name, uid, annotations=annotations, attempt=attempt)
        try:
            return await node.run_sandbox(config)
        except grpc.aio.AioRpcError as exc:
            failures.append(f"RunPodSandbox {name} (attempt {attempt}): {exc.details()}")
            await asyncio.sleep(1)
    raise AssertionError(f"{name}: no sandbox after {ATTEMPTS} attempts: {failures}")


async def remove(node: Node, sandbox_id: str, failures: list[str] | None = None) -> None:
    """The kubelet's teardown: ``StopPodSandbox`` until it succeeds, then ``RemovePodSandbox``
    likewise (each tears the network down: a DEL that fails fails the call)."""
    for step in (node.cri.stop, node.cri.remove):
        for _ in range(ATTEMPTS):
            try:
                await step(sandbox_id)
                break
            except grpc.aio.AioRpcError as exc:
                if failures is not None:
                    failures.append(f"{step.__name__} {sandbox_id[:12]}: {exc.details()}")
                await asyncio.sleep(1)
        else:
            raise AssertionError(f"{step.__name__} {sandbox_id} kept failing: {failures}")
    node.running.discard(sandbox_id)


async def _assert_every_network(node: Node, name: str, sandbox_id: str) -> tuple[str, str]:
    """The sandbox has ``eth0`` on the cluster network and ``net1`` on the NAD, and its
    network-status says so; returns the two addresses."""
    status = await node.cri.sandbox_status(sandbox_id)
    assert status.state == SANDBOX_READY, (name, status)
    addresses = await node.addresses(sandbox_id)
    assert sorted(addresses) == ["eth0", "net1"], f"{name} got {addresses}"
    [eth0], [net1] = addresses["eth0"], addresses["net1"]
    assert in_subnet(eth0, CLUSTER_SUBNET) and in_subnet(net1, NAD_SUBNET), (name, addresses)
    value = node.pod_annotation(name, STATUS)
    assert value is not None, f"no {STATUS} on {name}"
    assert [e["name"] for e in json.loads(value)] == [CLUSTER_NETWORK, f"default/{NAD}"]
    return eth0.split("/")[0], net1.split("/")[0]


async def test_a_rolling_restart_loses_no_del_and_gives_no_pod_the_wrong_network(
    node: Node,
) -> None:
    """The daemon is replaced (SIGTERM, then a new one with the same config, as a DaemonSet
    roll does) while sandboxes are created and removed: in flight when it is told to stop
    (those reach the draining daemon, or wait for the next one), and issued while no daemon
    answers at all (those wait in the shim, ADDs on ``/readyz`` and DELs on ``/healthz``).
    Every new sandbox gets every network; every removed one frees every address."""
    assert node.daemon.config["keepConfigOnExit"] is True  # the manifests' default
    netns_before = node.netns_files()
    nets = {NETWORKS: NAD}
    failures: list[str] = []
    old_names = [f"old-{i}" for i in range(2 * PER_PHASE)]
    old = await asyncio.gather(*(create(node, name, failures, **nets) for name in old_names))
    new_names = [f"new-{i}" for i in range(2 * PER_PHASE)]

    def phase(i: int) -> dict[tuple[str, str], asyncio.Task[Any]]:
        """The phase's operations, by the shim call each makes: (``ADD``|``DEL``, pod)."""
        part = slice(i * PER_PHASE, (i + 1) * PER_PHASE)
        tasks = {("ADD", n): create(node, n, failures, **nets) for n in new_names[part]}
        tasks |= {
            ("DEL", n): remove(node, s, failures)
            for n, s in zip(old_names[part], old[part], strict=True)
        }
        return {call: asyncio.create_task(op) for call, op in tasks.items()}

    first: dict[tuple[str, str], asyncio.Task[Any]] = {}
    second: dict[tuple[str, str], asyncio.Task[Any]] = {}
    try:
        await _restart_under_load(node, phase, first, second)
    finally:  # a failed check: let every operation end (against a daemon) before the teardown
        assert node.daemon.proc is not None
        if node.daemon.proc.returncode is not None:
            await node.daemon.start()
        await asyncio.gather(*first.values(), *second.values(), return_exceptions=True)
    created = {
        pod: task.result() for (verb, pod), task in (first | second).items() if verb == "ADD"
    }

    eth0s, net1s = [], []
    for name, sandbox_id in created.items():
        eth0, net1 = await _assert_every_network(node, name, sandbox_id)
        eth0s.append(eth0)
        net1s.append(net1)
    # Every removed sandbox freed both its addresses: only the new sandboxes' are allocated.
    assert node.allocations() == {CLUSTER_NETWORK: sorted(eth0s), NAD: sorted(net1s)}, failures
    for sandbox_id in old:
        dels = node.daemon_requests("DEL", sandbox_id)
        assert dels and all(line.endswith(": ok") for line in dels), (sandbox_id, dels)

    await asyncio.gather(*(remove(node, s, failures) for s in created.values()))
    for sandbox in await node.cri.list():  # failed attempts' sandboxes: the kubelet's GC
        await remove(node, sandbox.id, failures)
    assert node.netns_files() == netns_before
    assert node.allocations() == {}, failures
    assert node.delegate_caches() == []
    assert node.daemon_results() == []
    assert node.runtime_cache_files() == []


async def _restart_under_load(
    node: Node,
    phase: Callable[[int], dict[tuple[str, str], asyncio.Task[Any]]],
    first: dict[tuple[str, str], asyncio.Task[Any]],
    second: dict[tuple[str, str], asyncio.Task[Any]],
) -> None:
    """Phase 0 in flight, SIGTERM; once the daemon has exited, phase 1, which must wait in
    the shims for the next daemon; then the next daemon; then every operation's end."""
    first.update(phase(0))
    await eventually(
        lambda: node.shim_calls() or all(t.done() for t in first.values()),
        what="the first sandboxes reaching the shim",
    )
    assert await node.daemon.stop() == 0, node.daemon.log()[-3000:]  # SIGTERM, drain, exit
    # No daemon now, and no fallback: containerd still runs the shim for every pod.
    assert (await node.loaded_networks()) == ["multus-cni-network"]
    second.update(phase(1))

    def settled() -> bool:
        calls = set(node.shim_calls())
        return all(call in calls or task.done() for call, task in second.items())

    await eventually(settled, what="every second-phase operation in a shim, or done")
    done = sorted(call for call, task in second.items() if task.done())
    assert not done, f"done while no daemon answered (past Multus, or dropped): {done}"
    await node.daemon.start()  # the DaemonSet's next pod: the same config
    await asyncio.gather(*first.values(), *second.values())


def _shim_env(node: Node, sandbox_id: str, netns: str) -> dict[str, str]:
    """The CNI environment containerd gave the shim for the sandbox (from its libcni cache)."""
    cache = node.runtime_cache(sandbox_id)
    assert cache is not None
    return {
        "CNI_CONTAINERID": sandbox_id,
        "CNI_NETNS": netns,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(node.rig.bin_dir),
        "CNI_ARGS": ";".join(f"{key}={value}" for key, value in cache["cniArgs"]),
    }


async def test_a_del_while_the_daemon_is_away_is_retried_not_lost(node: Node) -> None:
    """A DEL that outlasts its wait (ADD's 60 s; 1 s here) fails with code 11 and leaves
    everything in place for the runtime's next try, which the next daemon then serves."""
    sandbox_id = await node.run_pod("patient", **{NETWORKS: NAD})
    allocated = node.allocations()
    assert sorted(allocated) == [CLUSTER_NETWORK, NAD]
    netns = (await node.cri.sandbox_status(sandbox_id)).netns_path()
    env = {**_shim_env(node, sandbox_id, netns), readiness.TIMEOUT_ENV: "1"}
    stdin = node.generated.read_bytes()  # the config the runtime still has
    shim = node.rig.bin_dir / "multus-shim"
    assert await node.daemon.stop() == 0

    away = await run_shim(shim, "DEL", stdin, env=env)
    assert away.returncode == 1, away
    error = away.json()
    assert error["code"] == TRY_AGAIN_LATER, error
    assert "multusd is restarting" in error["msg"] and "try again later" in error["msg"], error
    assert node.allocations() == allocated  # nothing done, nothing dropped
    assert node.delegate_caches() == [sandbox_id]

    note_file = Path(node.daemon.socket_dir) / readiness.RESTART_NOTE
    note = readiness.RestartNote.decode(note_file.read_bytes())
    assert note is not None and note.kept_file() == (str(node.generated), True)
    await node.daemon.start()
    again = await run_shim(shim, "DEL", stdin, env=env)  # the runtime's next try
    assert (again.returncode, again.stdout) == (0, ""), again
    assert node.allocations() == {}
    # The next daemon wrote the config anew: the note describes nothing now, and can never
    # take a config away that a daemon still serves.
    await eventually(lambda: note.kept_file() == (None, True), what="the note gone stale")
    await node.remove_pod(sandbox_id)  # containerd's own DELs, later: nothing left to do
    assert node.runtime_cache_files() == []


async def test_an_uninstall_gives_the_node_back_to_its_cluster_network(node: Node) -> None:
    """#1429: the DaemonSet is deleted, its daemon stops for good, and the config it kept for
    a replacement would send every pod to a shim with no daemon, forever. Once the restart
    window has closed (aged here), the next DEL takes the config away (asking the runtime to
    try again), containerd goes back to the cluster network, and pods start again. What is
    lost is what an uninstall always loses: the NAD address of a sandbox removed after it."""
    sandbox_id = await node.run_pod("left", **{NETWORKS: NAD})
    nad_address = node.allocations()[NAD]
    assert await node.daemon.stop() == 0  # no replacement comes
    assert node.generated_config() is not None  # kept, for a replacement
    note_file = Path(node.daemon.socket_dir) / readiness.RESTART_NOTE
    note = readiness.RestartNote.decode(note_file.read_bytes())
    assert note is not None
    assert note.kept_file() == (str(node.generated), True)
    assert note.until == note.stopped + readiness.RESTART_WINDOW

    note.until = time.time() - 1  # ten minutes later
    note_file.write_bytes(note.encode())
    failures: list[str] = []
    with pytest.raises(grpc.aio.AioRpcError) as retired:
        await node.cri.stop(sandbox_id)  # its DEL retires the config, and asks for another try
    details = retired.value.details() or ""
    assert f"removed {node.generated}, so that the runtime uses its cluster network" in details
    assert not node.generated.exists() and not note_file.exists()
    await eventually(
        lambda: _equals(node.loaded_networks(), [CLUSTER_NETWORK]),
        what="containerd back on the cluster network",
    )
    await remove(node, sandbox_id, failures)  # the kubelet's next tries: the cluster network's DEL

    after = await create(node, "after", failures, **{NETWORKS: NAD})
    assert list(await node.addresses(after)) == ["eth0"]  # the cluster network, as before Multus
    await remove(node, after, failures)
    assert node.allocations() == {NAD: nad_address}, failures
    assert node.delegate_caches() == [sandbox_id]


async def _equals(value: Awaitable[Any], expected: Any) -> bool:
    return bool(await value == expected)
