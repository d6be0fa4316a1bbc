"""Suite-wide guards: every test has a timeout (pyproject), warnings are errors (pyproject),
no test may leave asyncio tasks running behind it, no callback may hold a test's event loop
for long (the loop guard, tests/loopguard.py), and the session leaves the node as it found it
(the node guard below; docs/development.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.hostsnap import host_links, mount_state, sysctls, tree
from tests.loopguard import slow_callback_seconds, watching


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


E2E = Path(__file__).parent / "e2e"
BLOCKS_THE_LOOP = {
    "tests/kubesim/test_kubesim_scale.py::test_list_50k_pods": "its body creates 50,000 pods "
    "in the emulator's store between two awaits (about 1.5 s), as its setup",
}
"""Tests the loop guard leaves alone, and why: only for a test's own deliberate setup."""
TIMES_THE_LOOP = {
    "tests/integration/k8s/test_api_protection.py::"
    "test_a_server_that_slows_down_and_recovers_sees_no_burst_above_the_bucket": "it counts "
    "requests per second as the emulator, on the same loop, starts them; debug mode's work "
    "on every callback delays the emulator's reads and bunches them (107 in a second where "
    "the client's bucket granted at most 100)",
}
"""Tests that measure the loop's timing, which the guard's debug mode would change."""


@pytest_asyncio.fixture(autouse=True)
async def _loop_never_blocks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """The loop guard (tests/loopguard.py) around everything set up after it: the test, its
    fixtures, their teardown. Not for ``tests/e2e``: there the daemon under test runs in a
    process of its own, and the loop here holds only the emulator and the test's helpers, some
    of which run ``ip`` and ``unshare`` synchronously by design."""
    node = request.node
    nodeid = node.nodeid.split("[")[0]
    if node.path.is_relative_to(E2E) or nodeid in BLOCKS_THE_LOOP or nodeid in TIMES_THE_LOOP:
        yield
        return
    threshold = slow_callback_seconds()
    with watching(asyncio.get_running_loop(), threshold) as slow:
        yield
    if slow.found:
        lines = "\n".join(slow.found)
        pytest.fail(f"a callback held the event loop over {threshold} s:\n{lines}", False)


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
# by the test itself. So the whole session is checked: the trees below, /run/netns (whether it
# exists and is a mount point, and the names in it), the root namespace's forwarding sysctls
# and the host's links are snapshotted before collection and compared after the last teardown;
# any difference fails the session with the list of what changed.

NODE_TREES = ("/etc/cni", "/var/lib/cni", "/opt/cni", "/run/cni")
NETNS_DIR = "/run/netns"
GUARD_ENV = "MULTUSD_NODE_GUARD"
"""``warn``: report the changes without failing (a machine shared by concurrent sessions)."""
SETTLE_SECONDS = 5.0
"""How long a difference may take to go away (the kernel removes a deleted namespace's veth
peers asynchronously) before it counts."""

Snapshot = dict[str, dict[str, str]]
_BEFORE = pytest.StashKey[Snapshot]()
_CHANGES = pytest.StashKey[list[str]]()


def _link_names() -> dict[str, str]:
    try:
        return dict.fromkeys(host_links(), "link")
    except (OSError, subprocess.SubprocessError) as exc:
        return {"(ip -o link)": f"unavailable: {exc}"}


def node_snapshot() -> Snapshot:
    """What a test could leave behind on the node, as ``{area: {name: description}}``."""
    snap: Snapshot = {root: tree(root) for root in NODE_TREES}
    try:
        snap[NETNS_DIR] = dict.fromkeys(sorted(os.listdir(NETNS_DIR)), "netns")
    except FileNotFoundError:
        snap[NETNS_DIR] = {}
    snap[NETNS_DIR]["(itself)"] = mount_state(NETNS_DIR)  # created, mounted
    snap["sysctls"] = sysctls()
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
