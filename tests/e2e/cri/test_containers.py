"""Containers, not only sandboxes, through containerd's CRI as the kubelet runs them: a pod's
container with a host path mounted, its log read back from the CRI log file, host-network and
host-PID pods (which containerd must run without any CNI call), a privileged container, and a
container in a pod network sandbox stopped and removed before its sandbox.

The one image is the rig's pause image (:mod:`tests.e2e.cri.image`): a busybox and nothing
else, whose entrypoint sleeps; a container's ``command`` replaces that. busybox's shell runs
its applets (``cat``, ``ls``, ``ip``) without a ``PATH``."""

from __future__ import annotations

import os
from pathlib import Path

from tests.e2e.cri.conftest import CLUSTER_SUBNET
from tests.e2e.cri.criapi import (
    CONTAINER_EXITED,
    CONTAINER_RUNNING,
    ContainerConfig,
    ContainerStatus,
    CriClient,
    Mount,
    SandboxConfig,
    read_container_log,
)
from tests.e2e.cri.image import IMAGE
from tests.e2e.cri.node import Node, in_subnet
from tests.waits import eventually

BUSYBOX = "/bin/busybox"
DEADLINE = 60  # a container's start and exit on a loaded machine; only stops a hung test


async def _wait_state(cri: CriClient, container_id: str, state: int) -> ContainerStatus:
    """Poll ``ContainerStatus`` until the container is in ``state``; that (verbose) status."""

    async def reached() -> ContainerStatus | None:
        status = await cri.container_status(container_id, verbose=True)
        return status if status.state == state else None

    found: ContainerStatus = await eventually(
        reached, DEADLINE, 0.05, what=f"container {container_id} in state {state}"
    )
    return found


async def _run_to_exit(
    node: Node, sandbox_id: str, sandbox: SandboxConfig, container: ContainerConfig
) -> tuple[ContainerStatus, str]:
    """Create, start, wait for the exit of, and remove a container; its last status and log."""
    container_id = await node.cri.create_container(sandbox_id, container, sandbox)
    await node.cri.start_container(container_id)
    status = await _wait_state(node.cri, container_id, CONTAINER_EXITED)
    log = read_container_log(status.log_path)
    await node.cri.remove_container(container_id)
    return status, log


def _host_pod(node: Node, name: str, *, privileged: bool = False) -> SandboxConfig:
    """A ``hostNetwork: true, hostPID: true`` pod, created in the emulator; its config."""
    return SandboxConfig(
        name,
        node.create_pod(name),
        log_directory=str(node.workdir / "logs" / name),
        host_network=True,
        host_pid=True,
        privileged=privileged,
    )


def _spec_namespaces(info: dict[str, object]) -> set[str]:
    spec = info["runtimeSpec"]
    assert isinstance(spec, dict)
    return {namespace["type"] for namespace in spec["linux"]["namespaces"]}


async def test_host_network_container_mounts_a_host_dir_and_logs(node: Node) -> None:
    """The container reads and writes the bound host directory, exits 3, and its output is in
    the log file under the sandbox's log directory. The sandbox has the host's network: no
    namespace of its own, no IP, and neither containerd nor the daemon saw a CNI call,
    although the daemon's config is loaded (a pod network sandbox would have called it)."""
    netns_before = node.netns_files()
    data = node.workdir / "data"
    data.mkdir()
    (data / "in").write_text("from the host\n")
    sandbox = _host_pod(node, "hostnet")
    sandbox_id = await node.run_sandbox(sandbox)

    status = await node.cri.sandbox_status(sandbox_id)
    assert (status.ip, status.additional_ips) == ("", ())
    info = status.verbose_info()
    assert "network" not in _spec_namespaces(info)
    # containerd's own decoding of what we sent (NamespaceMode NODE = 2)
    assert info["config"]["linux"] == {
        "security_context": {"namespace_options": {"network": 2, "pid": 2}}
    }
    assert node.netns_files() == netns_before
    assert node.runtime_cache_files() == []
    assert node.daemon_requests("ADD", sandbox_id) == []

    script = "echo hello; cat /data/in; echo out > /data/out; exit 3"
    job = ContainerConfig(
        "job",
        IMAGE,
        command=[BUSYBOX, "sh", "-c", script],
        mounts=[Mount("/data", str(data))],
        log_path="job/0.log",
        host_network=True,
        host_pid=True,
    )
    exited, log = await _run_to_exit(node, sandbox_id, sandbox, job)
    assert exited.exit_code == 3, exited
    assert exited.reason == "Error", exited  # containerd's word for a non-zero exit
    assert exited.metadata.name == "job"
    assert exited.log_path == str(Path(sandbox.log_directory) / "job/0.log")
    assert [(m.container_path, m.host_path) for m in exited.mounts] == [("/data", str(data))]
    sent = exited.verbose_info()["config"]  # containerd's own decoding of what we sent
    assert sent["mounts"] == [{"container_path": "/data", "host_path": str(data)}]
    assert sent["linux"] == {"security_context": {"namespace_options": {"network": 2, "pid": 2}}}
    assert log == "hello\nfrom the host\n", log
    assert (data / "out").read_text() == "out\n"

    await node.remove_pod(sandbox_id)
    assert await node.cri.list_containers() == []
    assert await node.cri.list() == []
    assert node.daemon_requests("DEL", sandbox_id) == []
    assert node.runtime_cache_files() == []


async def test_privileged_container_sees_the_hosts_network_and_processes(node: Node) -> None:
    """A privileged container of a host-network, host-PID pod lists the host's interfaces,
    is in the host's PID namespace (its ``/proc`` shows this test's process), has every
    capability containerd has, and a writable ``/sys``."""
    sandbox = _host_pod(node, "privileged", privileged=True)
    sandbox_id = await node.run_sandbox(sandbox)
    script = (
        "ls -1 /sys/class/net; echo; readlink /proc/self/ns/pid; "
        f"test -d /proc/{os.getpid()} && echo sees-the-test; "
        "grep CapEff /proc/self/status; grep ' /sys ' /proc/mounts"
    )
    probe = ContainerConfig(
        "probe",
        IMAGE,
        command=[BUSYBOX, "sh", "-c", script],
        log_path="probe.log",
        host_network=True,
        host_pid=True,
        privileged=True,
    )
    links_before = sorted(os.listdir("/sys/class/net"))
    exited, log = await _run_to_exit(node, sandbox_id, sandbox, probe)
    links_after = sorted(os.listdir("/sys/class/net"))
    assert exited.exit_code == 0, (exited, log)
    assert exited.reason == "Completed", exited
    listing, _, rest = log.partition("\n\n")
    pid_namespace, seen, capabilities, sys_mount = rest.splitlines()
    assert sorted(listing.split()) in (links_before, links_after), log  # (links may come and go)
    assert "lo" in listing.split()
    assert pid_namespace == os.readlink("/proc/self/ns/pid"), log
    assert seen == "sees-the-test"
    assert node.rig.proc is not None
    [containerd_caps] = [
        line
        for line in Path(f"/proc/{node.rig.proc.pid}/status").read_text().splitlines()
        if line.startswith("CapEff:")
    ]
    assert capabilities == containerd_caps, log
    assert exited.verbose_info()["config"]["linux"]["security_context"]["privileged"] is True
    assert sys_mount.split()[3].split(",")[0] == "rw", sys_mount
    await node.remove_pod(sandbox_id)
    assert await node.cri.list_containers() == []


async def test_container_in_a_pod_network_stopped_and_removed(node: Node) -> None:
    """A long-running container in a sandbox that got its network from the daemon: it sees
    the sandbox's eth0 with the pod's IP, runs until StopContainer (PID 1 ignores SIGTERM, so
    the timeout's SIGKILL ends it), and StopContainer, RemoveContainer and then the
    sandbox's stop and removal leave nothing: no container, sandbox, namespace or IP."""
    netns_before = node.netns_files()
    name = "worker"
    sandbox = SandboxConfig(
        name, node.create_pod(name), log_directory=str(node.workdir / "logs" / name)
    )
    sandbox_id = await node.run_sandbox(sandbox)
    ip = (await node.cri.sandbox_status(sandbox_id)).ip
    assert in_subnet(ip, CLUSTER_SUBNET), ip
    worker = ContainerConfig(
        "worker",
        IMAGE,
        command=[BUSYBOX, "sh", "-c", "ip -o -4 addr show eth0; exec sleep 2147483647"],
        log_path="worker/0.log",
    )
    container_id = await node.cri.create_container(sandbox_id, worker, sandbox)
    await node.cri.start_container(container_id)
    running = await _wait_state(node.cri, container_id, CONTAINER_RUNNING)
    assert running.started_at > 0 and running.finished_at == 0, running
    log_path = running.log_path
    log = await eventually(
        lambda: (text := read_container_log(log_path)).endswith("\n") and text,
        DEADLINE,
        0.05,
        what="the address in its log",
    )
    assert f" inet {ip}/24 " in log, log
    [listed] = await node.cri.list_containers(sandbox_id)
    assert (listed.id, listed.sandbox_id, listed.metadata.name) == (
        container_id,
        sandbox_id,
        "worker",
    )
    assert listed.state == CONTAINER_RUNNING

    await node.cri.stop_container(container_id, timeout_s=1)
    stopped = await node.cri.container_status(container_id)
    assert stopped.state == CONTAINER_EXITED, stopped
    assert stopped.exit_code == 137, stopped  # 128 + SIGKILL
    await node.cri.stop_container(container_id, timeout_s=1)  # idempotent, as the CRI says
    await node.cri.remove_container(container_id)
    assert await node.cri.list_containers() == []

    await node.remove_pod(sandbox_id)
    assert await node.cri.list() == []
    assert node.netns_files() == netns_before
    assert node.allocations() == {}
    assert node.runtime_cache_files() == []
