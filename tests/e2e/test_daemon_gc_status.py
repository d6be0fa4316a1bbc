"""GC and STATUS through the real shim and daemon: node-level verbs with no pod context."""

from __future__ import annotations

import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.e2e.conftest import pod_env, shim_config, write_json
from tests.e2e.harness import PLUGIN_DIR, Daemon, addresses, run_shim

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
NODE_ENV = {"CNI_PATH": PLUGIN_DIR}


def _status_plugin(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "statusplugin"
    path.write_text(
        "#!/usr/bin/python3 -IS\nimport os, sys\n"
        "if os.environ.get('CNI_COMMAND') == 'VERSION':\n"
        '    print(\'{"cniVersion":"1.1.0","supportedVersions":["1.1.0"]}\'); sys.exit(0)\n'
        f"{body}\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


async def test_status_passes_a_plugin_error_code_through(
    start_daemon: StartDaemon, shim_path: Path, workdir: Path
) -> None:
    bin_dir = workdir / "statusbin"
    _status_plugin(
        bin_dir,
        "if os.environ['CNI_COMMAND'] == 'STATUS':\n"
        '    print(\'{"cniVersion":"1.1.0","code":50,"msg":"network not ready"}\'); sys.exit(1)',
    )
    cluster = write_json(
        workdir / "net.d" / "10-status.conf",
        {"cniVersion": "1.1.0", "name": "statusnet", "type": "statusplugin"},
    )
    daemon = await start_daemon(clusterNetwork=str(cluster), binDir=str(bin_dir))
    run = await run_shim(shim_path, "STATUS", shim_config(daemon, "1.1.0"), env=NODE_ENV)
    assert run.returncode == 1
    error = run.json()
    assert error["code"] == 50  # upstream's shim would print 999
    assert error["msg"] == "CmdStatus (shim): network not ready"


async def test_status_of_a_pre_1_1_plugin_is_ready(
    start_daemon: StartDaemon, shim_path: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    run = await run_shim(shim_path, "STATUS", shim_config(daemon, "1.1.0"), env=NODE_ENV)
    assert (run.returncode, run.stdout) == (0, "")


async def test_status_needs_a_1_1_shim_config(
    start_daemon: StartDaemon, shim_path: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    run = await run_shim(shim_path, "STATUS", shim_config(daemon, "1.0.0"), env=NODE_ENV)
    assert run.returncode == 1
    assert run.json()["msg"] == "config version does not allow STATUS"


async def test_gc_collects_attachments_the_runtime_no_longer_lists(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    keep_ns, stale_ns = await netns(), await netns()
    keep, stale = pod_env(keep_ns, pod="keep"), pod_env(stale_ns, pod="stale")
    for env in (keep, stale):
        assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    valid = [{"containerID": keep["CNI_CONTAINERID"], "ifname": "eth0"}]
    config = {**shim_config(daemon, "1.1.0"), "cni.dev/valid-attachments": valid}
    run = await run_shim(shim_path, "GC", config, env=NODE_ENV)
    assert (run.returncode, run.stdout) == (0, ""), run
    assert "eth0" in await addresses(keep_ns)
    assert "eth0" not in await addresses(stale_ns)  # the stale attachment was deleted
    cached = {p.name for p in (daemon.cni_dir / "results").iterdir()}
    assert cached == {f"testnet-{keep['CNI_CONTAINERID']}-eth0"}
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=keep)).returncode == 0


async def test_gc_without_a_runtime_list_keeps_every_cached_attachment(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, conflist_file: Path
) -> None:
    """Upstream's fallback: every attachment in the result cache counts as valid."""
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    name = await netns()
    env = pod_env(name)
    assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    run = await run_shim(shim_path, "GC", shim_config(daemon, "1.1.0"), env=NODE_ENV)
    assert (run.returncode, run.stdout) == (0, ""), run
    assert "eth0" in await addresses(name)
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
