"""Suite-wide guards: every test has a timeout (pyproject), warnings are errors (pyproject),
no test may leave asyncio tasks running behind it, and the session leaves the node as it
found it (the node guard below; docs/development.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio


@pytest_asyncio.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    await asyncio.sleep(0)
    leaked = [
        t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()
    ]
    for task in leaked:
        task.cancel()
    assert not leaked, f"test leaked tasks: {leaked}"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory right under /tmp: unix socket paths must fit in 108 bytes; tmp_path may not."""
    path = Path(tempfile.mkdtemp(prefix="mt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --- the node guard --------------------------------------------------------------------------
#
# Every test keeps its files under its own temp dirs, and a file a test leaves in a node's CNI
# directories (a stray 00-multus.conf sorts first and breaks every new pod) would go unnoticed
# by the test itself. So the whole session is checked: the trees below, the names in
# /run/netns and the host's links are snapshotted before collection and compared after the
# last teardown; any difference fails the session with the list of what changed.

NODE_TREES = ("/etc/cni", "/var/lib/cni", "/opt/cni")
NETNS_DIR = "/run/netns"
GUARD_ENV = "MULTUSD_NODE_GUARD"
"""``warn``: report the changes without failing (a machine shared by concurrent sessions)."""
SETTLE_SECONDS = 5.0
"""How long a difference may take to go away (the kernel removes a deleted namespace's veth
peers asynchronously) before it counts."""

Snapshot = dict[str, dict[str, str]]
_BEFORE = pytest.StashKey[Snapshot]()
_CHANGES = pytest.StashKey[list[str]]()


def _describe(st: os.stat_result, path: str) -> str:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return f"symlink -> {os.readlink(path)}"
    if stat.S_ISDIR(st.st_mode):
        return f"directory {mode:o}"  # its mtime moves with every entry made and removed
    if stat.S_ISREG(st.st_mode):
        return f"file {mode:o}, {st.st_size} bytes, mtime {st.st_mtime_ns}"
    return f"{stat.filemode(st.st_mode)} entry"


def _tree(root: str) -> dict[str, str]:
    """Every path under ``root`` (itself included), symlinks not followed."""
    entries: dict[str, str] = {}
    try:
        entries[root] = _describe(os.lstat(root), root)
    except FileNotFoundError:
        return entries
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            try:
                entries[path] = _describe(os.lstat(path), path)
            except FileNotFoundError:
                continue  # removed while we looked: the next snapshot decides
    return entries


def _link_names() -> dict[str, str]:
    try:
        out = subprocess.run(
            ["ip", "-o", "link"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return {"(ip -o link)": f"unavailable: {exc}"}
    # "2: eth0@if3: <BROADCAST,...> ..." -> "eth0"
    names = (line.split(": ", 2)[1].split("@")[0] for line in out.splitlines() if ": " in line)
    return dict.fromkeys(names, "link")


def node_snapshot() -> Snapshot:
    """What a test could leave behind on the node, as ``{area: {name: description}}``."""
    snap: Snapshot = {root: _tree(root) for root in NODE_TREES}
    try:
        snap[NETNS_DIR] = dict.fromkeys(sorted(os.listdir(NETNS_DIR)), "netns")
    except FileNotFoundError:
        snap[NETNS_DIR] = {}
    snap["host links"] = _link_names()
    return snap


def node_changes(before: Snapshot, after: Snapshot) -> list[str]:
    """One line per difference: ``<area>: <name>: added|removed|changed ...``."""
    lines: list[str] = []
    for area in before.keys() | after.keys():
        was, now = before.get(area, {}), after.get(area, {})
        for name in sorted(was.keys() | now.keys()):
            if name not in was:
                lines.append(f"{area}: {name}: added ({now[name]})")
            elif name not in now:
                lines.append(f"{area}: {name}: removed (was {was[name]})")
            elif was[name] != now[name]:
                lines.append(f"{area}: {name}: changed ({was[name]} -> {now[name]})")
    return sorted(lines)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = node_snapshot()


@pytest.hookimpl(trylast=True)  # after the runner's own teardown of what is still set up
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    deadline = time.monotonic() + SETTLE_SECONDS
    changes = node_changes(before, node_snapshot())
    while changes and time.monotonic() < deadline:
        time.sleep(0.25)
        changes = node_changes(before, node_snapshot())
    session.config.stash[_CHANGES] = changes
    failing = os.environ.get(GUARD_ENV, "") != "warn"
    passing = session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    if changes and failing and passing:  # a failed or interrupted run keeps its own status
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    changes = terminalreporter.config.stash.get(_CHANGES, [])
    if not changes:
        return
    failing = os.environ.get(GUARD_ENV, "") != "warn"
    verdict = "FAILED" if failing else f"warning only ({GUARD_ENV}=warn)"
    terminalreporter.section(f"node guard: {verdict}", sep="=", red=True, bold=True)
    terminalreporter.line(
        "The session changed the node (compared before collection and after the last teardown):"
    )
    for line in changes:
        terminalreporter.line(f"  {line}")
    terminalreporter.line(
        "Every test must keep its files, namespaces and links to itself (docs/development.md). "
        "On a machine where another test session ran at the same time, its state shows here "
        f"too: rerun alone, or set {GUARD_ENV}=warn there (CI runs one session at a time)."
    )
