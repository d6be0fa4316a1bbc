"""``healthPort``: the kubelet's ``httpGet`` probes reach the daemon on ``127.0.0.1`` (no
process in the container's cgroup), with the unix socket's answers (docs/configuration.md)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.e2e.conftest import daemon_config, pod_env, shim_config
from tests.e2e.faults import hang_rig
from tests.e2e.harness import Daemon, free_port, http_get, run_shim
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]


async def _readyz_is(port: int, status: int) -> bool:
    return (await http_get(port, "/readyz"))[0] == status


async def test_probes_answer_over_http_on_loopback(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    port = free_port()
    rig = hang_rig(workdir)
    daemon = await start_daemon(
        healthPort=port, delegates=rig.delegates(bridge_name, workdir), binDir=str(rig.bin_dir)
    )
    assert (await http_get(port, "/healthz"))[0] == 200
    status, body = await http_get(port, "/readyz")
    assert status == 200 and json.loads(body)["ready"] is True, body
    assert (await http_get(port, "/cni"))[0] == 404, "only the probes: no CNI over TCP"
    assert f"probes on 127.0.0.1:{port}" in daemon.log()
    # Draining after SIGTERM (a hung ADD keeps the drain going): not ready, still alive.
    env = pod_env(await netns())
    add = asyncio.create_task(run_shim(shim_path, "ADD", shim_config(daemon), env=env))
    await rig.pids(env["CNI_CONTAINERID"])
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    await eventually(lambda: _readyz_is(port, 500), 10)
    assert (await http_get(port, "/healthz"))[0] == 200
    assert await asyncio.wait_for(daemon.proc.wait(), 60) == 0
    await add
    assert rig.reserved_ips() == []


async def test_a_health_port_in_use_stops_start_up_with_its_name(workdir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = int(taken.getsockname()[1])
        daemon = Daemon(workdir, daemon_config(workdir, healthPort=port))
        await daemon.start(wait=False)
        assert daemon.proc is not None
        code = await asyncio.wait_for(daemon.proc.wait(), 60)
    assert code != 0
    assert f"failed to listen on 127.0.0.1:{port} (healthPort)" in daemon.log(), daemon.log()
