"""``bench.memory_limit.MemoryCgroup``, the memory tests' and benchmarks' cgroup rig, on cgroup
v2 and v1 trees made of plain files, on any machine.

The rig makes its cgroups on the hierarchy the daemon reads (v1's ``memory`` where it is
mounted, else v2); ``tests/e2e/test_faults_memory.py`` runs it on the machine's real one, which
on the project's machines is v1. These tests run the v2 path the same way on every machine:
which files it writes (``+memory`` in ``cgroup.subtree_control`` when the parent lacks it,
``memory.max``, ``memory.swap.max``, the pid into ``cgroup.procs``), which it reads
(``memory.events``' ``oom_kill``, ``memory.current``, ``memory.stat``, ``memory.peak``) and
what it says when the hierarchy cannot give it a memory controller. A plain directory is not
the kernel's: the files a real cgroup would have from its birth are written by the test once
the rig has made the directory, and taken away before it removes it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.memory_limit import MemoryCgroup
from multusd.cni.admission import MiB


def _v2_top(tmp: Path, *, controllers: str, enabled: str) -> Path:
    top = tmp / "cgroup2"
    top.mkdir()
    (top / "cgroup.controllers").write_text(controllers + "\n")
    (top / "cgroup.subtree_control").write_text(enabled + "\n")
    return top


def _empty(cgroup: MemoryCgroup) -> None:
    """What the kernel does at rmdir: the cgroup's files go with it (and no process is left,
    so the rig has nobody to wait for or kill)."""
    for path in cgroup.path.iterdir():
        path.unlink()


def test_v2_enables_memory_for_its_cgroup_sets_the_limit_and_reads_the_kernels_files(
    tmp_path: Path,
) -> None:
    top = _v2_top(tmp_path, controllers="cpuset cpu io memory pids", enabled="cpu io")
    rig = MemoryCgroup(64 * MiB, prefix="multusd-test", mount=(2, top))
    assert rig.path.parent == top and rig.path.name.startswith("multusd-test-")
    with rig as cgroup:
        assert (top / "cgroup.subtree_control").read_text() == "+memory\n"
        assert (cgroup.path / "memory.max").read_text() == f"{64 * MiB}\n"
        assert (cgroup.path / "memory.swap.max").read_text() == "0\n"

        # A process joins before it execs: its own pid, in this cgroup's cgroup.procs.
        done = subprocess.run(
            cgroup.argv(["sh", "-c", "echo $$"]), capture_output=True, text=True, check=True
        )
        assert cgroup.procs.read_text().split() == done.stdout.split()

        # What the kernel keeps: the rig reads the v2 names of each figure.
        (cgroup.path / "memory.events").write_text(
            "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"
        )
        (cgroup.path / "memory.current").write_text(f"{40 * MiB}\n")
        (cgroup.path / "memory.peak").write_text(f"{60 * MiB}\n")
        (cgroup.path / "memory.stat").write_text(
            f"anon {30 * MiB}\nfile {10 * MiB}\nfile_thp 1\nshmem {MiB}\nfile_mapped {MiB}\n"
            "file_dirty 0\nfile_writeback 0\n"
        )
        assert cgroup.oom_kills() == 2
        assert cgroup.usage() == 40 * MiB
        assert cgroup.unreclaimable() == 32 * MiB  # 40 less the 8 of 10 MiB reclaimable
        assert cgroup.peak() == 60 * MiB
        cgroup.set_limit(128 * MiB)
        assert (cgroup.path / "memory.max").read_text() == f"{128 * MiB}\n"
        cgroup.procs.write_text("")
        _empty(cgroup)
    assert not rig.path.exists()


def test_v2_leaves_an_enabled_memory_controller_as_it_is(tmp_path: Path) -> None:
    """systemd enables memory at the root already: nothing to write there."""
    top = _v2_top(tmp_path, controllers="cpu memory pids", enabled="cpu memory pids")
    before = (top / "cgroup.subtree_control").stat().st_mtime_ns
    with MemoryCgroup(64 * MiB, mount=(2, top)) as cgroup:
        assert (top / "cgroup.subtree_control").read_text() == "cpu memory pids\n"
        assert (top / "cgroup.subtree_control").stat().st_mtime_ns == before
        _empty(cgroup)


def test_v2_without_the_memory_controller_says_so_and_makes_nothing(tmp_path: Path) -> None:
    """A hybrid host's unified hierarchy (ours: ``hugetlb`` alone), where v1 holds memory."""
    top = _v2_top(tmp_path, controllers="hugetlb", enabled="")
    with (
        pytest.raises(RuntimeError, match=r"memory controller is not available .*: hugetlb\)"),
        MemoryCgroup(64 * MiB, mount=(2, top)),
    ):
        pass
    assert sorted(p.name for p in top.iterdir()) == ["cgroup.controllers", "cgroup.subtree_control"]


def test_v1_sets_the_limit_and_reads_the_v1_names(tmp_path: Path) -> None:
    top = tmp_path / "memory"
    top.mkdir()
    with MemoryCgroup(64 * MiB, mount=(1, top)) as cgroup:
        assert (cgroup.path / "memory.limit_in_bytes").read_text() == f"{64 * MiB}\n"
        assert not (cgroup.path / "memory.memsw.limit_in_bytes").exists()  # no swap accounting
        (cgroup.path / "memory.oom_control").write_text(
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
        )
        (cgroup.path / "memory.usage_in_bytes").write_text(f"{40 * MiB}\n")
        (cgroup.path / "memory.max_usage_in_bytes").write_text(f"{50 * MiB}\n")
        assert (cgroup.oom_kills(), cgroup.usage(), cgroup.peak()) == (3, 40 * MiB, 50 * MiB)
        _empty(cgroup)
