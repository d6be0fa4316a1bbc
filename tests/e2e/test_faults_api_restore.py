"""The API server comes back older: an etcd restore, and the pods created again by their owners
(same names, new UIDs, at versions the daemon has already seen for other objects).

The probe that found it: the reflector retried ``504 Too large resource version: 1206, current:
1205`` forever without relisting, 115 ADDs out of 115 failed over 120 s with ``expected pod UID
... but got ...``, and once the server's versions passed the old ones it carried on silently
with the stale pods. The daemon must relist from scratch, and ADDs for the new pods succeed
from its cache within seconds. Real daemon, real shim, real plugins; the emulator in process.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from multusd.kubesim import KubeSim, Settings
from tests.e2e.conftest import shim_config
from tests.e2e.harness import Daemon, ShimRun, addresses, run_shim, until_logged
from tests.e2e.kube import create_pod, start_kube, uid_env

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]


@pytest_asyncio.fixture(params=[True, False], ids=["streaming-lists", "server-without-them"])
async def kubesim(request: pytest.FixtureRequest) -> AsyncIterator[KubeSim]:
    """The daemon lists with streaming lists; a server without them makes it page (the 422
    refusal, then paged lists): the relist must work both ways."""
    async with KubeSim(Settings(bookmark_interval=1.0, watch_list=request.param)) as sim:
        yield sim


async def _pods_listed_at(daemon: Daemon, version: int, timeout: float = 20.0) -> None:
    """Wait (bounded) for the daemon to report its pod cache replaced by a list at ``version``:
    the reflector logs that line after the swap."""
    line = re.compile(rf"reflector pods: listed \d+ objects at resourceVersion {version}\b")
    await until_logged(daemon, line, timeout)


async def test_restore_to_an_older_version_relists_and_adds_succeed(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    backup = kubesim.snapshot()  # taken before the pods exist
    old = {name: create_pod(kubesim, name) for name in ("web", "db")}
    for i in range(30):  # the versions the daemon sees run ahead of what the restore reaches
        kubesim.patch("pods", "default", "db", {"metadata": {"annotations": {"n": str(i)}}})
    seen = kubesim.store.resource_version
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    await _pods_listed_at(daemon, seen)  # its first list

    kubesim.stats.reset()
    kubesim.restore(backup)
    new = {name: create_pod(kubesim, name) for name in ("web", "db")}
    restored = kubesim.store.resource_version
    assert restored < seen and not set(new.values()) & set(old.values())

    await _pods_listed_at(daemon, restored)
    # It asked for its old version once (the 504), then listed from scratch, no version.
    resumed = [r for r in kubesim.stats.requests() if r.verb == "watch" and r.resource == "pods"]
    assert resumed and f"resourceVersion={seen}" in resumed[0].query
    relist = next(
        r
        for r in kubesim.stats.requests()
        if r.resource == "pods" and r.verb in ("list", "watch") and r is not resumed[0]
    )
    assert "resourceVersion=" not in relist.query.replace("resourceVersionMatch=", "")
    if kubesim.state.settings.watch_list:  # a streaming list (the daemon's way)...
        assert relist.verb == "watch" and "sendInitialEvents=true" in relist.query
    else:  # ...or, from a server that refused those at start-up, pages
        assert relist.verb == "list"

    name = await netns()
    env = uid_env(name, "web", new["web"])
    kubesim.stats.reset()
    added: ShimRun = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    assert kubesim.stats.count("get", "pods") == 0  # served by the cache: it has the new UID
    assert "eth0" in await addresses(name)
    # The stale UID is what is refused now.
    stale = await run_shim(
        shim_path, "ADD", shim_config(daemon), env=uid_env(await netns(), "db", old["db"])
    )
    assert stale.returncode == 1
    assert f'expected pod UID "{old["db"]}" but got "{new["db"]}"' in stale.json()["msg"]
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
