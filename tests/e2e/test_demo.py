"""``multusd demo``: the README's first command, end to end, leaving nothing behind."""

from __future__ import annotations

import asyncio
import shutil
import sys

from tests.e2e.harness import REPO, ip


async def _demo(*prefix: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *prefix, sys.executable, "-m", "multusd", "demo",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_demo_wires_a_namespace_and_cleans_up() -> None:
    namespaces_before = await ip("netns", "list")
    code, out, err = await _demo()
    assert code == 0, out + err
    assert '"cniVersion": "1.0.0"' in out
    assert "eth0" in out and "10.250.77." in out
    assert "net1" in out and "10.88.10." in out  # the bridge NAD
    assert "net2" in out and "10.88.20.10/24" in out  # the macvlan NAD with its requested IP
    assert '"name": "default/macvlan-conf"' in out  # the network-status annotation
    assert "-- CHECK\nok" in out and "-- DEL\nok" in out
    assert await ip("netns", "list") == namespaces_before
    links = await ip("link")
    assert "mdemo" not in links and "mbr-example" not in links


async def test_demo_without_root_exits_2_with_a_clear_message() -> None:
    setpriv = shutil.which("setpriv")
    assert setpriv, "util-linux's setpriv is part of every Debian install"
    code, _out, err = await _demo(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
    assert code == 2
    assert "needs root" in err
