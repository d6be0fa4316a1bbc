"""The mount namespace containerd runs in (:mod:`tests.mountns`), on its own: private paths
that do not exist on the host are created nowhere on it, the host's entries around them stay
visible, and a shared path's mounts, and only its, reach the host."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import mountns


@pytest.fixture
def base() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="mmns-", dir="/tmp"))
    try:
        yield directory
    finally:
        for point in sorted(_mounts_under(directory), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        shutil.rmtree(directory, ignore_errors=True)


def _mounts_under(directory: Path) -> list[str]:
    prefix = f"{directory}/"
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [p for p in (line.split()[4] for line in lines) if p.startswith(prefix)]


def _run(ns: mountns.MountNamespace, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ns.argv(["sh", "-euc", script]), capture_output=True, text=True, timeout=60, check=False
    )


def test_private_paths_are_made_nowhere_on_the_host(base: Path) -> None:
    name = f"mmns-test-{os.getpid()}"
    lib, run = Path("/var/lib") / name / "deeper", Path("/run") / name
    assert not lib.parent.exists() and not run.exists()
    private_lib, private_run = base / "lib", base / "run"
    private_lib.mkdir()
    private_run.mkdir()
    (base / "visible").write_text("host\n")
    ns = mountns.MountNamespace(base / "stage", {lib: private_lib, run: private_run})
    assert ns.covered() == [Path("/run"), Path("/var/lib")]
    done = _run(
        ns,
        f"echo lib > {lib}/file; echo run > {run}/file; cat {base}/visible; echo ---;"
        " ls -A /run; echo ---; ls -A /var/lib; echo ---; cat /proc/self/mountinfo",
    )
    assert done.returncode == 0, done.stderr
    visible, run_listing, lib_listing, mountinfo = done.stdout.split("---\n")
    assert visible == "host\n"
    host_run = set(os.listdir("/run")) - {"mount"}  # libmount's per-namespace state: not bound
    assert set(run_listing.split()) == host_run | {name}
    assert set(lib_listing.split()) == set(os.listdir("/var/lib")) | {name}
    # Every mount of the namespace is a slave (or private): none can reach the host.
    assert not [line for line in mountinfo.splitlines() if " shared:" in line]
    assert (private_lib / "file").read_text() == "lib\n"
    assert (private_run / "file").read_text() == "run\n"
    assert not lib.parent.exists() and not run.exists()
    assert _mounts_under(base) == []


def test_shared_path_mounts_reach_the_host_and_nothing_else_does(base: Path) -> None:
    shared, other, private = base / "shared", base / "other", base / "private"
    for directory in (shared / "m", other, private):
        directory.mkdir(parents=True)
    mountns.make_shared_mount(shared)
    ns = mountns.MountNamespace(
        base / "stage", {Path(f"/run/mmns-test-{os.getpid()}"): private}, shared=[shared]
    )
    proc = subprocess.Popen(
        ns.argv([
            "sh", "-euc",
            f"mount -t tmpfs s {shared}/m; mount -t tmpfs o {other};"
            f" touch {shared}/m/ok {other}/ok; cat /proc/self/mountinfo > {base}/mountinfo;"
            " exec sleep 60",
        ]),
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (base / "mountinfo").exists() or not (base / "mountinfo").read_text():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the namespace never came up"
            time.sleep(0.05)
        namespace = mountns.namespace_of(proc.pid)
        assert namespace != mountns.namespace_of(os.getpid())
        assert mountns.processes_in(namespace) == [proc.pid]
        assert (shared / "m" / "ok").exists()  # the tmpfs under the shared path is the host's
        assert not (other / "ok").exists()  # the other one is the namespace's alone
        assert _mounts_under(base) == [str(shared), str(shared / "m")]
        inside = (base / "mountinfo").read_text().splitlines()
        shared_inside = sorted(line.split()[4] for line in inside if " shared:" in line)
        assert shared_inside == [str(shared), str(shared / "m")]
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    deadline = time.monotonic() + 30
    while mountns.processes_in(namespace):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # A mount propagated to the host stays there after the namespace is gone: its owner's
    # teardown unmounts it (the CRI rig's does: a network namespace left there is reported).
    assert _mounts_under(base) == [str(shared), str(shared / "m")]
