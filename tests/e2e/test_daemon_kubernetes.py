"""The daemon against the API emulator: pod lookups from the watch cache, the fallback GET,
the network-status PATCH, and start-up without an API server. Real shim, real plugins."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from multusd.kubesim import KubeSim
from multusd.kubesim.faults import ErrorRule
from tests.e2e.conftest import shim_config
from tests.e2e.harness import Daemon, addresses, run_shim
from tests.e2e.kube import (
    NETWORK_STATUS,
    NODE,
    create_pod,
    readyz,
    start_kube,
    uid_env,
    unreachable_kubeconfig,
)
from tests.netns import netns_path
from tests.waits import eventually

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]


async def test_cached_pod_costs_no_reads_and_one_status_patch(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    uid = create_pod(kubesim, "web")
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    assert await readyz(daemon) == (200, "caches synced")
    name = await netns()
    env = uid_env(name, "web", uid)
    kubesim.stats.reset()
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    assert kubesim.stats.count("get", "pods") == 0
    assert kubesim.stats.count("patch", "pods", "status") == 1
    pod = kubesim.get("pods", "default", "web", group="", version="v1")
    statuses = json.loads(pod["metadata"]["annotations"][NETWORK_STATUS])
    assert statuses[0]["name"] == "testnet"
    assert statuses[0]["interface"] == "eth0"
    assert statuses[0]["default"] is True
    assert statuses[0]["ips"][0].startswith("10.251.0.")
    assert pod["metadata"]["annotations"][NETWORK_STATUS].startswith('[{\n    "name": "testnet",')
    # The AddedInterface event is posted in the background, after the ADD returned.
    await eventually(lambda: kubesim.stats.count("create", "events") >= 1, 10)
    assert kubesim.stats.count("create", "events") == 1
    kubesim.stats.reset()
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0
    assert kubesim.stats.count("get", "pods") == 0
    assert "eth0" not in await addresses(name)
    # Where each request's wall time went, at debug level (docs/performance.md).
    cid = env["CNI_CONTAINERID"]
    add_line, del_line = (
        next(
            line
            for line in daemon.log().splitlines()
            if f"/cni {verb} phases (container={cid}):" in line
        )
        for verb in ("ADD", "DEL")
    )
    for phase in (
        "decode ", "pod_lookup ", "delegates ", "cache_save ", "delegate[testnet] ",
        "find[bridge] ", "spawn[bridge] ", "run[bridge] ", "cache_write ", "convert ",
        "status_write ", "respond ", "other ",
    ):  # fmt: skip
        assert phase in add_line, add_line
    for phase in ("cache_load ", "delegate_del[testnet] ", "cache_read ", "run[bridge] "):
        assert phase in del_line, del_line
    print(add_line, del_line, sep="\n")


async def test_protobuf_pod_cache(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    """The same zero-read ADD with pods read as Kubernetes protobuf."""
    uid = create_pod(kubesim, "web")
    daemon = await start_kube(
        start_daemon, kubesim, workdir, conflist_file, kubeClientProtobuf=True
    )
    pod_reads = [r for r in kubesim.stats.requests() if r.resource == "pods"]
    assert pod_reads and all("protobuf" in r.content_type for r in pod_reads if r.verb == "list")
    env = uid_env(await netns(), "web", uid)
    kubesim.stats.reset()
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    assert kubesim.stats.count("get", "pods") == 0
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0


async def test_direct_get_switch_reads_the_pod_on_every_request(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    """``benchmarkDirectPodGet``: the seed's lookups (one GET per ADD and per DEL), for A/B runs."""
    uid = create_pod(kubesim, "web")
    daemon = await start_kube(
        start_daemon, kubesim, workdir, conflist_file, benchmarkDirectPodGet=True
    )
    env = uid_env(await netns(), "web", uid)
    kubesim.stats.reset()
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    assert kubesim.stats.count("get", "pods") == 1
    # The pod is gone: DEL's GET answers 404 and DEL still succeeds from the delegate cache.
    kubesim.delete("pods", "default", "web", group="", version="v1")
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0
    assert kubesim.stats.count("get", "pods") == 2


async def test_pod_hidden_from_the_watch_is_found_by_the_fallback_get(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    create_pod(kubesim, "static-web", **{"kubernetes.io/config.source": "file"})
    kubesim.faults.hide("default", "static-web")
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    kubesim.stats.reset()
    env = uid_env(name, "static-web", "some-other-uid")  # static pods skip the UID check
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    assert kubesim.stats.count("get", "pods") == 1
    assert "eth0" in await addresses(name)
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0


async def test_missing_pod_gets_an_empty_result_and_no_networks(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file, podGetTimeoutSeconds=2)
    name = await netns()
    env = uid_env(name, "ghost", "uid-ghost")
    added = await run_shim(shim_path, "ADD", shim_config(daemon, "0.3.1"), env=env)
    assert added.returncode == 0, added
    result = added.json()
    assert result["cniVersion"] == "0.3.1"
    assert result["interfaces"] == [{"name": "eth0", "sandbox": netns_path(name)}]
    assert "eth0" not in await addresses(name)
    assert not (daemon.cni_dir / env["CNI_CONTAINERID"]).exists()


async def test_names_that_walk_the_api_path_are_refused_before_any_request(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    create_pod(kubesim, "victim", "kube-system")
    uid = create_pod(kubesim, "web", **{"k8s.v1.cni.cncf.io/networks": "../secrets@net1"})
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file, podGetTimeoutSeconds=1)
    kubesim.stats.reset()
    walker = uid_env(await netns(), "../../kube-system/pods/victim", "uid-x")
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=walker)
    assert added.returncode == 1
    assert (
        "invalid resource name \"../../kube-system/pods/victim\": [may not contain '/']"
        in (added.json()["msg"])
    ), added
    assert kubesim.stats.count("get", "pods") == 0, "no request was made"
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=walker)
    assert deleted.returncode == 0, deleted
    # A NAD named from the annotation, in a namespace that is not one: the annotation's own
    # rules (DNS-1123) refuse it first; the NAD lookup would too (tests/unit/k8s/test_names.py).
    added = await run_shim(
        shim_path, "ADD", shim_config(daemon), env=uid_env(await netns(), "web", uid)
    )
    assert added.returncode == 1
    assert "mismatch @ '..'" in added.json()["msg"], added
    assert kubesim.stats.count("get", "secrets") == 0


async def test_uid_mismatch_fails_add_but_not_del(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    uid = create_pod(kubesim, "web")
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    env = uid_env(await netns(), "web", "uid-old")
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 1
    assert f'expected pod UID "uid-old" but got "{uid}" from Kube API' in added.json()["msg"]
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0


async def test_pod_deleted_before_del(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    uid = create_pod(kubesim, "web")
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    name = await netns()
    env = uid_env(name, "web", uid)
    assert (await run_shim(shim_path, "ADD", shim_config(daemon), env=env)).returncode == 0
    kubesim.delete("pods", "default", "web", group="", version="v1")
    deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
    assert deleted.returncode == 0
    assert "eth0" not in await addresses(name)


async def test_status_write_survives_transient_api_errors(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    uid = create_pod(kubesim, "web")
    daemon = await start_kube(start_daemon, kubesim, workdir, conflist_file)
    kubesim.faults.errors.append(ErrorRule(code=500, verb="patch", resource="pods", count=2))
    env = uid_env(await netns(), "web", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    pod = kubesim.get("pods", "default", "web", group="", version="v1")
    assert NETWORK_STATUS in pod["metadata"]["annotations"]
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0


async def test_serves_after_a_bounded_wait_when_the_api_is_down(
    start_daemon: StartDaemon, workdir: Path, conflist_file: Path
) -> None:
    kubeconfig = unreachable_kubeconfig(workdir)
    daemon = await start_daemon(
        kubeconfig=str(kubeconfig), clusterNetwork=str(conflist_file), cacheSyncTimeoutSeconds=1
    )
    status, caches = await readyz(daemon)
    assert status == 200
    assert caches.startswith("caches not synced after 1s")


async def test_a_rotated_token_fails_no_add(
    start_daemon: StartDaemon,
    kubesim: KubeSim,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
    conflist_file: Path,
) -> None:
    """The emulator starts refusing the old token and the token file holds the new one: the
    daemon's next request gets a 401, reads the file again at once and is sent again, so no
    ADD fails (before, the file was read at most once a minute and every ADD failed until
    then)."""
    import yaml

    token_file = workdir / "token"
    token_file.write_text(f"{kubesim.token}\n")
    kubeconfig = await kubesim.write_kubeconfig(workdir / "kubeconfig")
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["users"][0]["user"] = {"tokenFile": str(token_file)}
    kubeconfig.write_text(yaml.safe_dump(doc))
    pods = {f"rot{i}": create_pod(kubesim, f"rot{i}") for i in range(4)}
    daemon = await start_daemon(
        env={"MULTUS_NODE_NAME": NODE}, kubeconfig=str(kubeconfig),
        clusterNetwork=str(conflist_file),
    )  # fmt: skip
    assert await readyz(daemon) == (200, "caches synced")
    envs = {pod: uid_env(await netns(), pod, uid) for pod, uid in pods.items()}
    first = await run_shim(shim_path, "ADD", shim_config(daemon), env=envs["rot0"])
    assert first.returncode == 0, first
    kubesim.state.rotate_token("rotated-token")
    token_file.write_text("rotated-token\n")
    kubesim.stats.reset()
    added = await asyncio.gather(
        *(run_shim(shim_path, "ADD", shim_config(daemon), env=envs[p]) for p in list(pods)[1:])
    )
    assert [a.returncode for a in added] == [0, 0, 0], added
    for pod in pods:
        annotations = kubesim.get("pods", "default", pod, group="", version="v1")["metadata"]
        assert NETWORK_STATUS in annotations["annotations"], pod
    codes = [r.code for r in kubesim.stats.requests() if r.verb == "patch"]
    assert codes.count(200) == 3 and set(codes) <= {200, 401}, codes
    assert "API token reloaded from" in daemon.log()
    for env in envs.values():
        deleted = await run_shim(shim_path, "DEL", shim_config(daemon), env=env)
        assert deleted.returncode == 0, deleted
