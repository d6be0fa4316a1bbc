"""``chrootDir``: delegates run chrooted into a host tree (the child only), through the daemon."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import pod_env, shim_config, write_json
from tests.e2e.harness import PLUGIN_DIR, Daemon, ip, run_shim

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
LIBS = ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2")


@pytest.fixture
def tree(workdir: Path) -> Iterator[tuple[Path, Path]]:
    """A chroot tree holding the real ``loopback`` plugin at the path where, outside, a decoy
    of the same name fails; plus the host's ``/proc`` and netns mounts, which the plugin uses."""
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
    mounts = [(Path("/var/run/netns"), root / "var/run/netns"), (Path("/proc"), root / "proc")]
    try:
        for source, target in mounts:  # what a plugin needs of the host, as /hostroot has
            target.mkdir(parents=True)
            subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
        yield root, bin_dir
    finally:
        for _, target in reversed(mounts):
            subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
            # Never let the workdir cleanup recurse into the host's /proc or netns mounts.
            assert not target.is_mount(), f"{target} is still mounted"


async def test_delegates_run_inside_the_chroot(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path,
    tree: tuple[Path, Path],
) -> None:  # fmt: skip
    root, bin_dir = tree
    cluster = write_json(
        workdir / "net.d" / "10-lo.conf", {"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}
    )
    daemon = await start_daemon(
        clusterNetwork=str(cluster), binDir=str(bin_dir), chrootDir=str(root)
    )
    name = await netns()
    env = pod_env(name)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    (lo,) = json.loads(await ip("-n", name, "-j", "link", "show", "lo"))
    assert "UP" in lo["flags"]
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
