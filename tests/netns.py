"""Network namespaces for tests, pinned on files of their own temp dirs.

Why not ``ip netns add``: it creates ``/run/netns`` (and makes it a shared mount) on a host
that has none, which is a change to the node the suite must leave as it found it; a file
bind-mounted by ``unshare --net=FILE`` is what a container runtime does for a pod anyway.
``tests/e2e/harness.ip("-n", path, ...)`` enters such a namespace with nsenter.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

NETNS_RUN_DIR = "/var/run/netns"
"""Where ``ip netns`` keeps its namespaces: never used by the tests (it would create and mount
``/run/netns`` on a host that has none); their namespaces are pinned on files of temp dirs."""


def netns_path(netns: str) -> str:
    """``CNI_NETNS`` for a namespace: a pinned one is its path; a bare name (only in messages
    and negative tests) is ``ip netns``'s."""
    return netns if netns.startswith("/") else f"{NETNS_RUN_DIR}/{netns}"


def pin_netns(path: Path) -> None:
    """A new network namespace kept alive by a bind mount on the file ``path`` (as a container
    runtime pins a pod's), with its loopback down, as ``ip netns add`` leaves it."""
    path.touch()
    subprocess.run(["unshare", f"--net={path}", "true"], check=True, timeout=30)


def unpin_netns(path: Path) -> None:
    """Drop the pin (the namespace goes with its last user) and the file."""
    subprocess.run(["umount", str(path)], capture_output=True, check=False, timeout=30)
    path.unlink(missing_ok=True)
