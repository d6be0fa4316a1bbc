"""A plugin's output is bounded (docs/reliability.md): a delegate that prints 10 MiB is killed
with its process group at the daemon's 1 MiB cap and its ADD fails and is rolled back, with
the daemon's memory barely moving; a network-status annotation that the API server would refuse
(all of a pod's annotations past 256 KiB) is refused before it is written, and the ADD rolled
back too. Real daemon, shim, plugins (bridge + host-local) and API emulator."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from multusd.cni.output import MAX_STDOUT
from multusd.kubesim import KubeSim
from tests.e2e.conftest import bridge_plugin, pod_env, shim_config, write_json
from tests.e2e.faults import HangRig, hang_rig, no_traceback, wait_gone
from tests.e2e.harness import Daemon, run_shim
from tests.e2e.kube import NETWORK_STATUS, create_pod, start_kube, uid_env
from tests.waits import group_members

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]

FLOOD = """#!/usr/bin/python3 -IS
# Chained after bridge: passes its result on, or, once {flag} exists, starts a child in its
# process group, notes both pids in {pids}/<container id> and prints a 10 MiB valid result.
import json, os, subprocess, sys
conf = json.load(sys.stdin)
if os.environ["CNI_COMMAND"] != "ADD":
    sys.exit(0)
if not os.path.exists({flag!r}):
    json.dump(conf["prevResult"], sys.stdout)
    sys.exit(0)
child = subprocess.Popen(["sleep", "1000"])
with open(os.path.join({pids!r}, os.environ["CNI_CONTAINERID"]), "w") as f:
    f.write(f"{{os.getpid()}} {{child.pid}}")
out = sys.stdout.buffer
out.write(b'{{"cniVersion": "1.0.0", "dns": {{"domain": "')
for _ in range(160):
    out.write(b"a" * 65536)
out.write(b'"}}}}')
"""

BIG_DNS = """#!/usr/bin/python3 -IS
# Chained after bridge: passes its result on with a {size}-byte DNS domain, which the
# network-status annotation repeats.
import json, os, sys
conf = json.load(sys.stdin)
if os.environ["CNI_COMMAND"] == "ADD":
    result = conf["prevResult"]
    result["dns"] = {{"domain": "d" * {size}}}
    json.dump(result, sys.stdout)
"""


def _plugin(rig: HangRig, name: str, text: str) -> None:
    path = rig.bin_dir / name
    path.write_text(text)
    path.chmod(0o755)


def _conflist(workdir: Path, bridge: str, last: str) -> Path:
    """The cluster network: bridge + host-local (an address per pod), then ``last``."""
    return write_json(
        workdir / "net.d" / "10-testnet.conflist",
        {
            "cniVersion": "1.0.0",
            "name": "testnet",
            "plugins": [bridge_plugin(bridge, workdir), {"type": last}],
        },
    )


def _vm_hwm_kib(pid: int) -> int:
    """The process's peak resident set so far (``VmHWM``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


async def test_a_plugin_printing_10_mib_is_killed_at_the_cap_and_its_add_rolled_back(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, bridge_name: str
) -> None:
    rig = hang_rig(workdir)
    flag = workdir / "flood-on"
    _plugin(rig, "flood", FLOOD.format(flag=str(flag), pids=str(rig.pids_dir)))
    conflist = _conflist(workdir, bridge_name, "flood")
    daemon = await start_daemon(clusterNetwork=str(conflist), binDir=str(rig.bin_dir))
    assert daemon.proc is not None
    config = shim_config(daemon)
    # A whole ADD and DEL first: the daemon's peak then includes everything serving one takes.
    warm = pod_env(await netns())
    assert (await run_shim(shim_path, "ADD", config, env=warm)).returncode == 0
    assert (await run_shim(shim_path, "DEL", config, env=warm)).returncode == 0
    peak_before = _vm_hwm_kib(daemon.proc.pid)

    flag.touch()
    env = pod_env(await netns())
    added = await run_shim(shim_path, "ADD", config, env=env)
    assert added.returncode == 1, added
    error = added.json()
    assert error["code"] == 999, error
    assert 'plugin type="flood" failed (add)' in error["msg"], error
    assert f"printed more than {MAX_STDOUT} bytes on stdout" in error["msg"], error
    assert "was killed" in error["msg"], error
    leader, child = await rig.pids(env["CNI_CONTAINERID"])
    assert await wait_gone(leader, child), "the plugin and its child are killed and reaped"
    assert group_members(leader) == [], "nothing of its process group is left"
    assert rig.reserved_ips() == [], "the rollback released the cluster network's address"
    assert (daemon.cni_dir / env["CNI_CONTAINERID"]).exists(), "kept for the DEL, as upstream"
    growth = _vm_hwm_kib(daemon.proc.pid) - peak_before
    assert growth < 4 * 1024, f"the daemon's peak grew {growth} KiB for a 10 MiB result"
    assert daemon.proc.returncode is None
    deleted = await run_shim(shim_path, "DEL", config, env=env)
    assert deleted.returncode == 0, deleted
    assert not (daemon.cni_dir / env["CNI_CONTAINERID"]).exists()
    assert no_traceback(daemon.log())


async def test_a_network_status_past_the_annotation_limit_is_refused_and_rolled_back(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    bridge_name: str,
) -> None:
    """The pod holds 200,000 bytes of annotations; its network-status would hold 70,000 more
    (a DNS domain its result carries): together past the API server's 262,144."""
    rig = hang_rig(workdir)
    _plugin(rig, "bigdns", BIG_DNS.format(size=70_000))
    uid = create_pod(kubesim, "crowded", **{"example.com/blob": "x" * 200_000})
    conflist = _conflist(workdir, bridge_name, "bigdns")
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist, binDir=str(rig.bin_dir))
    env = uid_env(await netns(), "crowded", uid)
    kubesim.stats.reset()
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 1, added
    error = added.json()
    assert error["code"] == 999, error
    msg: str = error["msg"]
    assert f"Multus: [default/crowded/{uid}]: error setting the networks status: " in msg, msg
    assert "over the API server's limit of 262144 bytes" in msg, msg
    assert kubesim.stats.count("patch", "pods") == 0, "refused before any request"
    pod: dict[str, Any] = kubesim.get("pods", "default", "crowded", group="", version="v1")
    assert NETWORK_STATUS not in pod["metadata"]["annotations"]
    assert rig.reserved_ips() == [], "the rollback released the cluster network's address"
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0, deleted
    assert no_traceback(daemon.log())
