"""``chrootDir``: delegates run chrooted into a host tree (the child only), through the daemon."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest_asyncio

from tests.e2e.conftest import NetnsFactory, pod_env, shim_config, write_json
from tests.e2e.harness import PLUGIN_DIR, Daemon, ip, run_shim

StartDaemon = Callable[..., Awaitable[Daemon]]
LIBS = ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2")


@pytest_asyncio.fixture
async def tree(workdir: Path, netns: NetnsFactory) -> AsyncIterator[tuple[Path, Path, str]]:
    """A chroot tree holding the real ``loopback`` plugin at the path where, outside, a decoy
    of the same name fails; plus the host's ``/proc`` and the pod's namespace (pinned in the
    directory bound at the same path inside), which the plugin uses. The namespace is made
    first: a recursive bind copies the pin, later mounts would not reach the copy."""
    name = await netns()
    bin_dir = workdir / "bin-chroot"
    bin_dir.mkdir()
    decoy = bin_dir / "loopback"
    decoy.write_text(
        '#!/usr/bin/python3 -IS\nprint(\'{"code": 100, "msg": "ran outside the chroot"}\')\n'
        "raise SystemExit(1)\n"
    )
    decoy.chmod(0o755)
    root = workdir / "root"
    inside = root / bin_dir.relative_to("/") / "loopback"
    inside.parent.mkdir(parents=True)
    shutil.copy(f"{PLUGIN_DIR}/loopback", inside)
    for lib in LIBS:
        target = root / lib.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(lib, target)
    pinned = netns.directory
    mounts = [(pinned, root / pinned.relative_to("/")), (Path("/proc"), root / "proc")]
    try:
        for source, target in mounts:  # what a plugin needs of the host, as /hostroot has
            target.mkdir(parents=True)
            subprocess.run(["mount", "--rbind", str(source), str(target)], check=True)
        yield root, bin_dir, name
    finally:
        for _, target in reversed(mounts):
            subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
            # Never let the workdir cleanup recurse into the host's /proc or netns mounts.
            assert not target.is_mount(), f"{target} is still mounted"


async def test_delegates_run_inside_the_chroot(
    start_daemon: StartDaemon, shim_path: Path, workdir: Path, tree: tuple[Path, Path, str]
) -> None:
    root, bin_dir, name = tree
    cluster = write_json(
        workdir / "net.d" / "10-lo.conf", {"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}
    )
    daemon = await start_daemon(
        clusterNetwork=str(cluster), binDir=str(bin_dir), chrootDir=str(root)
    )
    env = pod_env(name)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    (lo,) = json.loads(await ip("-n", name, "-j", "link", "show", "lo"))
    assert "UP" in lo["flags"]
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
