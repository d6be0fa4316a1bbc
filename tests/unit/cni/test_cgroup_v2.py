"""The daemon's memory reading on a cgroup v2 host, against a file tree laid out as Debian 12's
``/sys/fs/cgroup`` (the unified hierarchy, systemd's slices, the kubelet's pod and container
scopes) and its ``/proc/self`` (``0::/path`` alone in ``cgroup``), on any machine.

Debian 12 boots with cgroup v2; the machines the project runs on are hybrid (v1's ``memory``
controller, the unified hierarchy without it), so the kernel's own v2 files are never read
here. ``find_memory_cgroup`` takes the ``/proc/self`` to read as a parameter and finds the rest
from it (the mounts in ``mountinfo``), so the whole v2 path runs against these trees: the
discovery, ``memory.max`` and ``memory.current`` less ``memory.stat``'s reclaimable page cache,
the ancestors' limits, and the admission queue on top. ``tests/unit/cni/test_admission.py`` has
the v1, hybrid and shared cases; ``tests/e2e/test_faults_memory.py`` the real kernel's files, of
whichever version the machine has.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from cni_shim.errors import TRY_AGAIN_LATER, CNIError
from multusd.cni.admission import MemoryAdmission, MiB
from multusd.cni.cgroup import find_memory_cgroup, memory_mount
from tests.waits import eventually

GiB = 1024 * MiB
POD = "kubepods-burstable-pod3f5e0c1a_77b2_4c1e_9d0e_5a6b7c8d9e0f.slice"
CTR = "cri-containerd-" + "ab12" * 16 + ".scope"
CONTAINER = f"/kubepods.slice/kubepods-burstable.slice/{POD}/{CTR}"
"""The daemon's container as the kubelet (systemd cgroup driver) and containerd place it: our
DaemonSet's pod is Burstable (a memory limit, a cpu request and no cpu limit)."""

# Debian 12 (systemd 252, kernel 6.1): the unified hierarchy alone, at /sys/fs/cgroup.
MOUNTINFO = (
    "21 28 0:20 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "26 22 0:23 {root} {point} rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
    "28 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro\n"
)


def _stat(current: int, file: int, pinned: int) -> str:
    """A v2 ``memory.stat`` as the kernel writes it: ``file`` bytes of page cache, ``pinned``
    of them spread over what cannot be reclaimed without swap; the ``_thp`` and ``slab``
    fields share prefixes with those names and must not be taken for them."""
    part = pinned // 4
    fields = {
        "anon": current - file, "file": file, "kernel": 0, "kernel_stack": 16384,
        "pagetables": 4096, "sec_pagetables": 0, "percpu": 0, "sock": 0, "vmalloc": 0,
        "shmem": part, "zswap": 0, "zswapped": 0, "file_mapped": part, "file_dirty": part,
        "file_writeback": pinned - 3 * part, "swapcached": 0, "anon_thp": 0, "file_thp": 7,
        "shmem_thp": 7, "inactive_anon": current - file, "active_anon": 0,
        "inactive_file": file // 3, "active_file": file - file // 3, "unevictable": 0,
        "slab_reclaimable": 5, "slab_unreclaimable": 5, "slab": 10, "pgfault": 1234,
    }  # fmt: skip
    return "".join(f"{k} {v}\n" for k, v in fields.items())


@dataclass
class V2Host:
    """A v2 tree under ``point`` (what ``/sys/fs/cgroup`` shows) and a ``/proc/self`` that
    places the process in ``cgroup`` (``0::<cgroup>``), the mount's root being ``root``."""

    tmp: Path
    point: Path

    @classmethod
    def make(cls, tmp: Path) -> V2Host:
        point = tmp / "sys" / "fs" / "cgroup"
        point.mkdir(parents=True)
        controllers = "cpuset cpu io memory hugetlb pids rdma misc"
        (point / "cgroup.controllers").write_text(controllers + "\n")
        (point / "cgroup.subtree_control").write_text("cpuset cpu io memory pids\n")
        (point / "cgroup.procs").write_text("1\n")
        (point / "memory.stat").write_text(_stat(12 * GiB, 4 * GiB, GiB))  # no memory.max
        (point / "memory.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        return cls(tmp, point)

    def cgroup(self, path: str, limit: str, current: int, file: int = 0, pinned: int = 0) -> Path:
        """One cgroup directory with the memory controller's files (its parents must exist)."""
        directory = self.point / path.strip("/")
        directory.mkdir(exist_ok=True)
        files = {
            "cgroup.controllers": "cpu io memory pids\n",
            "cgroup.subtree_control": "",
            "cgroup.procs": "",
            "memory.max": limit + "\n",
            "memory.high": "max\n",
            "memory.low": "0\n",
            "memory.min": "0\n",
            "memory.current": f"{current}\n",
            "memory.peak": f"{current}\n",
            "memory.swap.max": "0\n",
            "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
            "memory.stat": _stat(current, file, pinned),
        }
        for name, text in files.items():
            (directory / name).write_text(text)
        return directory

    def set(self, directory: Path, *, limit: str | None = None, current: int | None = None,
            file: int = 0) -> None:  # fmt: skip
        if limit is not None:
            (directory / "memory.max").write_text(limit + "\n")
        if current is not None:
            (directory / "memory.current").write_text(f"{current}\n")
            (directory / "memory.stat").write_text(_stat(current, file, 0))

    def proc(self, cgroup: str, *, root: str = "/") -> Path:
        proc = self.tmp / "proc" / "self"
        proc.mkdir(parents=True, exist_ok=True)
        (proc / "cgroup").write_text(f"0::{cgroup}\n")
        (proc / "mountinfo").write_text(MOUNTINFO.format(root=root, point=self.point))
        return proc

    def kubelet(self, ctr_limit: int, ctr_current: int, pod_limit: int, pod_current: int,
                file: int = 0, pinned: int = 0) -> tuple[Path, Path]:  # fmt: skip
        """The kubelet's slices down to the daemon's container: (container, pod) dirs."""
        self.cgroup("kubepods.slice", str(23 * GiB), 6 * GiB)
        self.cgroup("kubepods.slice/kubepods-burstable.slice", "max", 4 * GiB)
        pod = self.cgroup(f"kubepods.slice/kubepods-burstable.slice/{POD}", str(pod_limit),
                          pod_current, file, pinned)  # fmt: skip
        ctr = self.cgroup(CONTAINER, str(ctr_limit), ctr_current, file, pinned)
        return ctr, pod


@pytest.fixture
def host(tmp_path: Path) -> V2Host:
    return V2Host.make(tmp_path)


# --- finding the cgroup -----------------------------------------------------------------------


def test_the_daemons_container_on_a_v2_node(host: V2Host) -> None:
    """The host's cgroup namespace, the whole hierarchy mounted: ``/proc/self/cgroup`` names
    the container's scope under the kubelet's slices. Every limited level counts (the
    container's, the pod's, the node's allocatable on ``kubepods.slice``); ``max``
    (burstable's) and the root's missing file are none; the tightest wins, here the pod's,
    which its pause container's memory counts in."""
    ctr, pod = host.kubelet(160 * MiB, 100 * MiB, 160 * MiB, 101 * MiB, 30 * MiB, 6 * MiB)
    memory = find_memory_cgroup(host.proc(CONTAINER))
    assert memory is not None and memory.version == 2
    assert [level.path for level in memory.levels] == [ctr, pod, host.point / "kubepods.slice"]
    assert {level.limit_file for level in memory.levels} == {"memory.max"}
    reading = memory.read()
    assert reading is not None
    # 101 MiB used less 30 MiB of page cache of which 6 cannot be reclaimed: 77 of 160.
    assert (reading.path, reading.limit, reading.used) == (pod, 160 * MiB, 77 * MiB)
    assert memory_mount(host.proc(CONTAINER)) == (2, host.point)


def test_a_private_cgroup_namespace_sees_its_cgroup_at_the_mount_point(tmp_path: Path) -> None:
    """A container in a cgroup namespace of its own (docker's default on v2): ``0::/``, and
    the mount's root is the container's own cgroup (the pod's limit above it is out of
    sight)."""
    host = V2Host(tmp_path, tmp_path / "sys" / "fs" / "cgroup")
    host.point.parent.mkdir(parents=True)
    host.cgroup("", str(160 * MiB), 90 * MiB, 10 * MiB, 2 * MiB)
    memory = find_memory_cgroup(host.proc("/"))
    assert memory is not None and [level.path for level in memory.levels] == [host.point]
    reading = memory.read()
    assert reading is not None and (reading.limit, reading.used) == (160 * MiB, 82 * MiB)


def test_a_bind_mounted_container_cgroup(host: V2Host) -> None:
    """No cgroup namespace, and only the container's own cgroup mounted at /sys/fs/cgroup
    (runc's fallback in a user namespace; v1 containers' usual view): the host's path in
    ``/proc/self/cgroup``, the same path as the mount's root."""
    view = V2Host(host.tmp, host.tmp / "ctr-view")
    view.point.mkdir()
    view.cgroup("", str(160 * MiB), 40 * MiB)
    memory = find_memory_cgroup(view.proc(CONTAINER, root=CONTAINER))
    assert memory is not None and [level.path for level in memory.levels] == [view.point]


def test_a_systemd_service_with_memory_max(host: V2Host) -> None:
    """The daemon run by systemd (``MemoryMax=50M``) on a Debian 12 host."""
    host.cgroup("system.slice", "max", GiB)
    service = host.cgroup("system.slice/multusd.service", str(50 * MiB), 20 * MiB)
    memory = find_memory_cgroup(host.proc("/system.slice/multusd.service"))
    assert memory is not None and [level.path for level in memory.levels] == [service]


def test_no_limit_anywhere_means_no_admission(host: V2Host) -> None:
    host.cgroup("user.slice", "max", GiB)
    host.cgroup("user.slice/session-3.scope", "max", MiB)
    assert find_memory_cgroup(host.proc("/user.slice/session-3.scope")) is None


def test_the_hybrid_hosts_v1_controller_wins_over_the_unified_mount(tmp_path: Path) -> None:
    """A hybrid host (ours) lists both in ``/proc/self/cgroup``; the memory controller is on
    v1 there, so that is the one read (and the one the memory tests' rig makes cgroups on)."""
    v1 = tmp_path / "cgroup" / "memory"
    v1.mkdir(parents=True)
    unified = V2Host(tmp_path, tmp_path / "cgroup" / "unified")
    unified.point.mkdir()
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text("4:memory:/\n1:name=systemd:/\n0::/\n")
    (proc / "mountinfo").write_text(
        f"35 31 0:32 / {v1} rw,relatime - cgroup cgroup rw,memory\n"
        f"41 31 0:38 / {unified.point} rw,relatime - cgroup2 cgroup2 rw\n"
    )
    assert memory_mount(proc) == (1, v1)


def test_a_cgroup_gone_or_garbled_is_no_limit_at_start(host: V2Host) -> None:
    """A level whose files cannot be read or parsed is left out, as a level without a limit."""
    host.cgroup("pod", str(100 * MiB), 10 * MiB)
    ctr = host.cgroup("pod/ctr", str(50 * MiB), 10 * MiB)
    (ctr / "memory.current").write_text("garbled\n")
    memory = find_memory_cgroup(host.proc("/pod/ctr"))
    assert memory is not None and [level.path for level in memory.levels] == [host.point / "pod"]


# --- admission on v2 --------------------------------------------------------------------------


def _admission(host: V2Host, *, current: int) -> tuple[MemoryAdmission, Path]:
    """The daemon's container alone limited, at 50 MiB: ``current`` used, no page cache."""
    ctr, _ = host.kubelet(50 * MiB, current, 200 * MiB, current)
    memory = find_memory_cgroup(host.proc(CONTAINER))
    assert memory is not None
    return MemoryAdmission(memory, estimate=4 * MiB, reserve=0, poll_interval=0.01), ctr


async def test_v2_queues_when_full_and_starts_when_memory_current_falls(host: V2Host) -> None:
    admission, ctr = _admission(host, current=48 * MiB)  # 2 MiB free: none fits
    order: list[int] = []

    async def plugin(number: int) -> None:
        async with admission.admitted(None):
            order.append(number)

    tasks = []
    for number in range(3):
        tasks.append(asyncio.create_task(plugin(number)))
        await eventually(lambda: admission.queued == len(tasks))
    assert order == []
    host.set(ctr, current=10 * MiB)
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == [0, 1, 2] and admission.waited == 3


async def test_v2_reclaimable_file_pages_are_room(host: V2Host) -> None:
    """``memory.current`` counts the page cache; its ``file`` pages, active or inactive, are
    what the kernel takes back before an OOM kill."""
    admission, ctr = _admission(host, current=48 * MiB)
    host.set(ctr, current=48 * MiB, file=20 * MiB)
    async with asyncio.timeout(5), admission.admitted(None):
        assert admission.waited == 0


async def test_v2_refusal_names_the_limit_and_the_cgroup(host: V2Host) -> None:
    admission, ctr = _admission(host, current=48 * MiB)
    loop = asyncio.get_running_loop()
    with pytest.raises(CNIError) as caught:
        async with admission.admitted(loop.time() + 0.05, "netplugin /usr/lib/cni/bridge"):
            raise AssertionError("admitted without room")
    assert caught.value.code == TRY_AGAIN_LATER
    assert caught.value.msg.startswith(
        f"netplugin /usr/lib/cni/bridge not run: 2.0 MiB free under the memory limit of "
        f"50.0 MiB ({ctr})"
    )


async def test_v2_limit_lifted_to_max_admits(host: V2Host) -> None:
    """``memory.max`` set back to ``max`` while the daemon runs (a resized pod): no limit, so
    nothing to wait for."""
    admission, ctr = _admission(host, current=48 * MiB)
    host.set(ctr, limit="max")
    host.set(host.point / "kubepods.slice" / "kubepods-burstable.slice" / POD, limit="max")
    host.set(host.point / "kubepods.slice", limit="max")
    async with asyncio.timeout(5), admission.admitted(None):
        assert admission.waited == 0
