"""Memory admission against a fake cgroup tree: discovery (v1, v2, hybrid, containers), the
working set, and the FIFO queue with its deadline. The real kernel's files are exercised by
``tests/e2e/test_faults_memory.py``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cni_shim.errors import TRY_AGAIN_LATER, CNIError
from multusd.cni.admission import MemoryAdmission, MiB
from multusd.cni.cgroup import find_memory_cgroup
from tests.waits import eventually

V1_UNLIMITED = "9223372036854771712"


def _v1_mountinfo(point: Path, root: str = "/") -> str:
    return (
        "24 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        f"31 23 0:28 / {point.parent} rw,relatime - tmpfs tmpfs rw,mode=755\n"
        f"32 31 0:29 / {point.parent}/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        f"35 31 0:32 {root} {point} rw,relatime - cgroup cgroup rw,memory\n"
        f"41 31 0:38 / {point.parent}/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )


def _v1_dir(path: Path, limit: str, usage: int, cache: int = 0, pinned: int = 0) -> Path:
    """A v1 cgroup directory: ``cache`` bytes of page cache, of which ``pinned`` are spread
    over what cannot be reclaimed (shmem, mapped, dirty, writeback)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "memory.limit_in_bytes").write_text(limit + "\n")
    (path / "memory.usage_in_bytes").write_text(f"{usage}\n")
    part = pinned // 4
    (path / "memory.stat").write_text(
        f"cache 1\nrss {usage}\nmapped_file 1\ninactive_file 1\ntotal_cache {cache}\n"
        f"total_rss {usage - cache}\ntotal_shmem {part}\ntotal_mapped_file {part}\n"
        f"total_dirty {part}\ntotal_writeback {pinned - 3 * part}\n"
        f"total_inactive_file {cache // 3}\ntotal_active_file {cache - cache // 3}\n"
    )
    return path


def _v2_dir(path: Path, limit: str, current: int, cache: int = 0, pinned: int = 0) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "memory.max").write_text(limit + "\n")
    (path / "memory.current").write_text(f"{current}\n")
    part = pinned // 4
    (path / "memory.stat").write_text(
        f"anon {current - cache}\nfile {cache}\nshmem {part}\nfile_mapped {part}\n"
        f"file_dirty {part}\nfile_writeback {pinned - 3 * part}\n"
        f"active_file {cache - cache // 3}\ninactive_file {cache // 3}\n"
    )
    return path


def _proc(tmp: Path, cgroup: str, mountinfo: str) -> Path:
    proc = tmp / "proc-self"
    proc.mkdir(exist_ok=True)
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text(mountinfo)
    return proc


def _v1_tree(
    tmp: Path, *, limit: int, usage: int, cache: int = 0, pinned: int = 0
) -> tuple[Path, Path]:
    """A v1 host: the daemon in /pods/daemon under the memory mount; returns (proc, cgroup)."""
    point = tmp / "cgroup" / "memory"
    _v1_dir(point, V1_UNLIMITED, 10 * 1024 * MiB)
    _v1_dir(point / "pods", V1_UNLIMITED, usage)
    cgroup = _v1_dir(point / "pods" / "daemon", str(limit), usage, cache, pinned)
    membership = "5:devices:/\n4:memory:/pods/daemon\n3:cpu,cpuacct:/\n0::/\n"
    return _proc(tmp, membership, _v1_mountinfo(point)), cgroup


def _set_usage(cgroup: Path, usage: int, cache: int = 0) -> None:
    _v1_dir(cgroup, (cgroup / "memory.limit_in_bytes").read_text().strip(), usage, cache)


# --- discovery --------------------------------------------------------------------------------


def test_v1_reads_usage_minus_reclaimable_page_cache_under_the_limit(tmp_path: Path) -> None:
    """Active and inactive file pages alike are room; shmem, mapped, dirty and writeback
    pages are not (multusd/cni/cgroup.py)."""
    proc, cgroup = _v1_tree(tmp_path, limit=50 * MiB, usage=40 * MiB, cache=8 * MiB, pinned=2 * MiB)
    memory = find_memory_cgroup(proc)
    assert memory is not None and memory.version == 1
    assert [level.path for level in memory.levels] == [cgroup]  # unlimited ancestors dropped
    reading = memory.read()
    assert reading is not None
    assert (reading.limit, reading.used, reading.headroom) == (50 * MiB, 34 * MiB, 16 * MiB)
    assert reading.path == cgroup


def test_v2_reads_current_minus_reclaimable_page_cache(tmp_path: Path) -> None:
    point = tmp_path / "unified"
    point.mkdir()
    (point / "memory.stat").write_text("anon 1\n")  # the root cgroup: no memory.max
    cgroup = _v2_dir(point / "kubepods" / "pod1" / "ctr", "52428800", 30 * MiB, 3 * MiB, 1 * MiB)
    _v2_dir(point / "kubepods" / "pod1", "max", 30 * MiB)
    _v2_dir(point / "kubepods", "max", 30 * MiB)
    mountinfo = f"30 23 0:26 / {point} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    proc = _proc(tmp_path, "0::/kubepods/pod1/ctr\n", mountinfo)
    memory = find_memory_cgroup(proc)
    assert memory is not None and memory.version == 2
    reading = memory.read()
    assert reading is not None
    assert (reading.limit, reading.used, reading.path) == (50 * MiB, 28 * MiB, cgroup)


def test_the_tightest_ancestor_wins(tmp_path: Path) -> None:
    """A pod-level limit shared with a sidecar can be tighter than the container's own."""
    point = tmp_path / "unified"
    pod = _v2_dir(point / "pod", str(60 * MiB), 55 * MiB)
    _v2_dir(pod / "daemon", str(50 * MiB), 30 * MiB)
    mountinfo = f"30 23 0:26 / {point} rw - cgroup2 cgroup2 rw\n"
    memory = find_memory_cgroup(_proc(tmp_path, "0::/pod/daemon\n", mountinfo))
    assert memory is not None and len(memory.levels) == 2
    reading = memory.read()
    assert reading is not None and (reading.path, reading.headroom) == (pod, 5 * MiB)


def test_hybrid_host_uses_the_v1_memory_controller(tmp_path: Path) -> None:
    """Hybrid hosts also mount the unified hierarchy, where the memory controller is not."""
    proc, cgroup = _v1_tree(tmp_path, limit=50 * MiB, usage=10 * MiB)
    _v2_dir(tmp_path / "cgroup" / "unified", "max", 0)
    memory = find_memory_cgroup(proc)
    assert memory is not None and memory.version == 1 and memory.levels[0].path == cgroup


def test_a_container_sees_its_own_cgroup_at_the_mount_point(tmp_path: Path) -> None:
    """Without a cgroup namespace the container's mount is rooted at its own cgroup, and
    /proc/self/cgroup names the same path."""
    point = tmp_path / "sys fs" / "memory"  # a blank, escaped as \\040 in mountinfo
    _v1_dir(point, str(50 * MiB), 20 * MiB)
    escaped = str(point).replace(" ", "\\040")
    mountinfo = (
        f"35 31 0:32 /kubepods/burstable/pod1/ctr {escaped} ro,nosuid - cgroup cgroup rw,memory\n"
    )
    proc = _proc(tmp_path, "4:memory:/kubepods/burstable/pod1/ctr\n", mountinfo)
    memory = find_memory_cgroup(proc)
    assert memory is not None and [level.path for level in memory.levels] == [point]


@pytest.mark.parametrize("limit", [V1_UNLIMITED, "9223372036854775807"])
def test_no_limit_means_no_admission(tmp_path: Path, limit: str) -> None:
    proc, cgroup = _v1_tree(tmp_path, limit=1, usage=1)
    _v1_dir(cgroup, limit, MiB)
    assert find_memory_cgroup(proc) is None


def test_v2_max_means_no_admission(tmp_path: Path) -> None:
    point = tmp_path / "unified"
    _v2_dir(point / "ctr", "max", MiB)
    mountinfo = f"30 23 0:26 / {point} rw - cgroup2 cgroup2 rw\n"
    assert find_memory_cgroup(_proc(tmp_path, "0::/ctr\n", mountinfo)) is None


@pytest.mark.parametrize(
    ("cgroup", "mountinfo"),
    [
        (
            "4:memory:/elsewhere\n",
            "35 31 0:32 /kubepods/ctr {point} rw - cgroup cgroup rw,memory\n",
        ),
        ("4:memory:/x\n", ""),  # not mounted at all
        ("", "35 31 0:32 / {point} rw - cgroup cgroup rw,memory\n"),  # not in a cgroup
    ],
)
def test_a_cgroup_that_cannot_be_found_means_no_admission(
    tmp_path: Path, cgroup: str, mountinfo: str
) -> None:
    point = tmp_path / "memory"
    _v1_dir(point, str(50 * MiB), MiB)
    proc = _proc(tmp_path, cgroup, mountinfo.format(point=point))
    assert find_memory_cgroup(proc) is None


def test_no_proc_means_no_admission(tmp_path: Path) -> None:
    assert find_memory_cgroup(tmp_path / "missing") is None


# --- admission --------------------------------------------------------------------------------


def _admission(tmp: Path, *, usage: int, limit: int = 50 * MiB) -> tuple[MemoryAdmission, Path]:
    proc, cgroup = _v1_tree(tmp, limit=limit, usage=usage)
    memory = find_memory_cgroup(proc)
    assert memory is not None
    return MemoryAdmission(memory, estimate=4 * MiB, reserve=0, poll_interval=0.01), cgroup


async def test_admits_at_once_while_there_is_room(tmp_path: Path) -> None:
    admission, _ = _admission(tmp_path, usage=30 * MiB)  # 20 MiB free: room for 5
    async with admission.admitted(None), admission.admitted(None), admission.admitted(None):
        assert admission.running == 3
    assert admission.running == 0 and admission.waited == 0


async def test_each_running_plugin_counts_until_it_finishes(tmp_path: Path) -> None:
    """The usage read does not yet show a plugin just started: admitted ones are counted."""
    admission, _ = _admission(tmp_path, usage=38 * MiB)  # 12 MiB free: 3 x 4 MiB
    order: list[str] = []
    release = asyncio.Event()

    async def plugin(name: str) -> None:
        async with admission.admitted(None):
            order.append(f"start {name}")
            await release.wait()
            order.append(f"end {name}")

    tasks = [asyncio.create_task(plugin(str(i))) for i in range(5)]
    await eventually(lambda: admission.running == 3 and admission.queued == 2)
    assert order == ["start 0", "start 1", "start 2"] and admission.running == 3
    release.set()
    await asyncio.gather(*tasks)
    assert order[:6] == ["start 0", "start 1", "start 2", "end 0", "end 1", "end 2"]
    assert sorted(order[6:]) == ["end 3", "end 4", "start 3", "start 4"]
    assert admission.waited == 2 and admission.running == 0


async def test_the_queue_is_fifo(tmp_path: Path) -> None:
    admission, cgroup = _admission(tmp_path, usage=48 * MiB)  # no room for anyone
    order: list[int] = []

    async def plugin(number: int) -> None:
        async with admission.admitted(None):
            order.append(number)

    tasks = []
    for number in range(6):
        tasks.append(asyncio.create_task(plugin(number)))
        await eventually(lambda: admission.queued == len(tasks))  # in line, in this order
    assert order == []
    _set_usage(cgroup, 10 * MiB)  # room again: found on the head's next look
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == list(range(6))


async def test_the_reserve_stays_free_of_plugins(tmp_path: Path) -> None:
    proc, cgroup = _v1_tree(tmp_path, limit=50 * MiB, usage=37 * MiB)  # 13 MiB free
    memory = find_memory_cgroup(proc)
    admission = MemoryAdmission(memory, estimate=4 * MiB, reserve=8 * MiB, poll_interval=0.01)
    async with admission.admitted(None):  # 4 + 8 <= 13
        task = asyncio.create_task(admission.admitted(None).__aenter__())
        await eventually(lambda: admission.queued == 1)
        assert not task.done()  # 2 x 4 + 8 > 13
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    _set_usage(cgroup, 39 * MiB)  # 11 MiB free: under 4 + 8
    with pytest.raises(CNIError):
        async with admission.admitted(asyncio.get_running_loop().time() + 0.05):
            pass
    _set_usage(cgroup, 37 * MiB)  # 13 MiB free again
    # One runs (a second ADD would need 2 x 4 + 8); a DEL may use the reserve: it gives
    # memory back, and a refused one is lost.
    async with admission.admitted(None), asyncio.timeout(5), admission.admitted(None, urgent=True):
        pass


async def test_dels_queue_ahead_of_adds(tmp_path: Path) -> None:
    """A DEL frees what its pod holds; it must not wait behind a queue of new ADDs."""
    admission, cgroup = _admission(tmp_path, usage=48 * MiB)
    order: list[str] = []

    async def plugin(name: str, urgent: bool) -> None:
        async with admission.admitted(None, urgent=urgent):
            order.append(name)

    tasks = []
    for name, urgent in (("add1", False), ("add2", False), ("del1", True), ("add3", False),
                         ("del2", True)):  # fmt: skip
        tasks.append(asyncio.create_task(plugin(name, urgent)))
        await eventually(lambda: admission.queued == len(tasks))  # in line, in this order
    assert order == [] and admission.queued == 5
    _set_usage(cgroup, 10 * MiB)
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == ["del1", "del2", "add1", "add2", "add3"]


async def test_a_del_with_room_passes_queued_adds_at_once(tmp_path: Path) -> None:
    admission, cgroup = _admission(tmp_path, usage=48 * MiB)
    add = asyncio.create_task(admission.admitted(None).__aenter__())
    await eventually(lambda: admission.queued == 1)
    _set_usage(cgroup, 45 * MiB)  # room for one: the DEL arrives before the ADD's next look
    async with asyncio.timeout(5), admission.admitted(None, urgent=True):
        assert admission.queued == 1
    add.cancel()
    with pytest.raises(asyncio.CancelledError):
        await add


async def test_reclaimable_page_cache_is_room(tmp_path: Path) -> None:
    admission, cgroup = _admission(tmp_path, usage=48 * MiB)
    _set_usage(cgroup, 48 * MiB, cache=20 * MiB)
    async with asyncio.timeout(5), admission.admitted(None):
        assert admission.waited == 0


async def test_the_deadline_ends_the_wait_with_code_11(tmp_path: Path) -> None:
    admission, _ = _admission(tmp_path, usage=48 * MiB)
    loop = asyncio.get_running_loop()
    with pytest.raises(CNIError) as caught:
        async with admission.admitted(loop.time() + 0.1, "plugin /opt/cni/bin/bridge"):
            raise AssertionError("admitted without room")
    assert caught.value.code == TRY_AGAIN_LATER
    assert caught.value.msg.startswith("plugin /opt/cni/bin/bridge not run: 2.0 MiB free under")
    assert "50.0 MiB" in caught.value.msg and "4.0 MiB needed per plugin" in caught.value.msg
    assert "0.0 MiB kept in reserve for other than DELs" in caught.value.msg
    assert admission.refused == 1 and admission.running == 0


async def test_a_waiter_behind_the_head_gets_its_deadline_too(tmp_path: Path) -> None:
    admission, _ = _admission(tmp_path, usage=48 * MiB)
    loop = asyncio.get_running_loop()
    head = asyncio.create_task(admission.admitted(loop.time() + 5).__aenter__())
    await eventually(lambda: admission.queued == 1)
    with pytest.raises(CNIError) as caught:
        async with admission.admitted(loop.time() + 0.05):
            pass
    assert caught.value.code == TRY_AGAIN_LATER
    head.cancel()
    with pytest.raises(asyncio.CancelledError):
        await head


async def test_a_cancelled_head_hands_its_turn_on(tmp_path: Path) -> None:
    """A request that goes away while queued (its client closed) leaves the queue, and the
    next one takes the head at once."""
    admission, cgroup = _admission(tmp_path, usage=48 * MiB)
    first = asyncio.create_task(admission.admitted(None).__aenter__())
    await eventually(lambda: admission.queued == 1)
    done = asyncio.Event()

    async def second() -> None:
        async with admission.admitted(None):
            done.set()

    task = asyncio.create_task(second())
    await eventually(lambda: admission.queued == 2)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    _set_usage(cgroup, 10 * MiB)
    await asyncio.wait_for(task, 5)
    assert done.is_set() and admission.running == 0


async def test_a_finishing_plugin_wakes_the_head_without_waiting_for_the_timer(
    tmp_path: Path,
) -> None:
    proc, _ = _v1_tree(tmp_path, limit=50 * MiB, usage=44 * MiB)  # 6 MiB: room for 1
    memory = find_memory_cgroup(proc)
    admission = MemoryAdmission(memory, estimate=4 * MiB, reserve=0, poll_interval=60)  # no timer
    hold = asyncio.Event()

    async def running() -> None:
        async with admission.admitted(None):
            await hold.wait()

    first = asyncio.create_task(running())
    await eventually(lambda: admission.running == 1)
    second = asyncio.create_task(running())
    await eventually(lambda: admission.queued == 1)
    held = admission.admitted(None)  # kept: a dropped one would be finalized, and release
    third = asyncio.create_task(held.__aenter__())
    await eventually(lambda: admission.queued == 2)
    assert admission.running == 1 and not second.done()  # 6 MiB < 4 x 2: second waits
    hold.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    await asyncio.wait_for(third, 5)
    assert admission.running == 1
    await held.__aexit__(None, None, None)
    assert admission.running == 0


async def test_an_unreadable_cgroup_admits(tmp_path: Path) -> None:
    admission, cgroup = _admission(tmp_path, usage=48 * MiB)
    (cgroup / "memory.stat").unlink()
    async with asyncio.timeout(5), admission.admitted(None):
        pass


async def test_without_a_limit_nothing_is_read(tmp_path: Path) -> None:
    admission = MemoryAdmission(None)
    assert not admission.enabled
    async with admission.admitted(None), admission.admitted(None):
        assert admission.running == 0  # not even counted
