"""Snapshots of what a test could leave on the host: a directory tree, entry by entry, and the
host's network links. The session's node guard (``tests/conftest.py``) and the demo's own
before/after check (``tests/e2e/test_demo.py``) compare the same snapshots, so a leak one of
them would see cannot be missed by the other for a different idea of "unchanged"."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path


def describe(path: str, *, digest: bool = False) -> str:
    """One entry, symlinks not followed: its type and mode, and for a regular file its size and
    mtime (plus a SHA-256 of its bytes with ``digest``, for a rewrite that keeps both)."""
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return f"symlink -> {os.readlink(path)}"
    if stat.S_ISDIR(st.st_mode):
        return f"directory {mode:o}"  # its mtime moves with every entry made and removed
    if stat.S_ISREG(st.st_mode):
        described = f"file {mode:o}, {st.st_size} bytes, mtime {st.st_mtime_ns}"
        if digest:
            described += f", sha256 {hashlib.sha256(Path(path).read_bytes()).hexdigest()}"
        return described
    return f"{stat.filemode(st.st_mode)} entry"


def tree(root: str, *, digest: bool = False) -> dict[str, str]:
    """Every path under ``root`` (itself included) described; empty when ``root`` is absent."""
    entries: dict[str, str] = {}
    try:
        entries[root] = describe(root, digest=digest)
    except FileNotFoundError:
        return entries
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            try:
                entries[path] = describe(path, digest=digest)
            except FileNotFoundError:
                continue  # removed while we looked: the next snapshot decides
    return entries


FORWARDING_SYSCTLS = (
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/ipv4/conf/all/forwarding",
    "/proc/sys/net/ipv6/conf/all/forwarding",
)
"""The root namespace's forwarding switches: the bridge plugin with ``isGateway`` turns the
first two on in the namespace it runs in (the ``ipMasq``/gateway set-up of a node)."""


def sysctls(paths: tuple[str, ...] = FORWARDING_SYSCTLS) -> dict[str, str]:
    """``{path: value}`` of the forwarding sysctls of the namespace this process is in."""
    values: dict[str, str] = {}
    for path in paths:
        try:
            values[path] = Path(path).read_text().strip()
        except FileNotFoundError:
            values[path] = "absent"  # IPv6 disabled in the kernel
    return values


def mount_state(path: str) -> str:
    """Whether ``path`` exists, and whether it is a mount point (``ip netns add`` makes
    ``/run/netns`` one, shared, the first time it runs)."""
    if not os.path.lexists(path):
        return "absent"
    points = {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    return f"{describe(path)}, {'a mount point' if path in points else 'not a mount point'}"


def host_links() -> dict[str, str]:
    """The host's links as ``{name: its line of ip -o link}`` (the line names a link's master
    and peer too). Raises ``OSError``/``SubprocessError`` when ``ip`` cannot answer."""
    out = subprocess.run(
        ["ip", "-o", "link"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    # "2: eth0@if3: <BROADCAST,...> ..." -> "eth0"
    return {line.split(": ", 2)[1].split("@")[0]: line for line in out.splitlines() if ": " in line}
