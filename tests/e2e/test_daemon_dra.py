"""DRA end to end: the real shim and daemon, a NAD with ``k8s.v1.cni.cncf.io/resourceName``,
and a pod whose device comes from a ``resource.k8s.io/v1`` ResourceClaim, its ResourceSlices
in the API emulator. The device ID reaches the delegate (``deviceID``), two NADs naming the
resource take the claim's two devices in sorted order, a pod without claims costs no DRA
request, and an unallocated claim fails the ADD with upstream's text."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from multusd.kubesim import KubeSim
from tests.e2e.conftest import shim_config
from tests.e2e.harness import run_shim
from tests.e2e.kube import NODE, StartDaemon, create_pod, start_kube, uid_env

MakeNetns = Callable[[], Awaitable[str]]

NETWORKS = "k8s.v1.cni.cncf.io/networks"
RESOURCE = "intel.com/sriov"
DRIVER = "sriov.example.com"
DRA_API = "resource.k8s.io/v1"


def _recorder(workdir: Path) -> tuple[Path, Path]:
    """A bin dir with the cluster network's real plugins and ``recorder``, which appends each
    config it gets (with its ``CNI_IFNAME``) to a JSON-lines file."""
    bin_dir = workdir / "recbin"
    bin_dir.mkdir()
    record = workdir / "stdin.jsonl"
    plugin = bin_dir / "recorder"
    plugin.write_text(
        "#!/usr/bin/python3 -IS\nimport sys, json, os\n"
        "conf = json.load(sys.stdin)\n"
        "conf['_ifname'] = os.environ.get('CNI_IFNAME', '')\n"
        "conf['_command'] = os.environ.get('CNI_COMMAND', '')\n"
        f"open({str(record)!r}, 'a').write(json.dumps(conf) + '\\n')\n"
        "print(json.dumps({'cniVersion': '1.0.0'}))\n"
    )
    plugin.chmod(0o755)
    for real in ("bridge", "host-local", "tuning"):  # the cluster network's plugins
        (bin_dir / real).symlink_to(f"/usr/lib/cni/{real}")
    return bin_dir, record


def _seed_dra(kubesim: KubeSim) -> None:
    """The NAD, this node's slice (two VFs, listed unsorted) and another node's, and a claim
    allocated both VFs (as the scheduler leaves it: status written, kept by the seed)."""
    kubesim.create({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "sriov-net", "namespace": "default",
                     "annotations": {"k8s.v1.cni.cncf.io/resourceName": RESOURCE}},
        "spec": {"config": json.dumps({"cniVersion": "1.0.0", "type": "recorder"})},
    })  # fmt: skip
    for node, ids in ((NODE, ("0000:03:00.2", "0000:03:00.1")), ("node-other", ("0000:01:00.1",))):
        kubesim.create({
            "apiVersion": DRA_API, "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-sriov"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"vf{i}", "attributes": {
                         "k8s.cni.cncf.io/deviceID": {"string": device_id},
                         "k8s.cni.cncf.io/resourceName": {"string": RESOURCE}}}
                         for i, device_id in enumerate(ids)]},
        })  # fmt: skip
    for name, allocated in (("web-sriov", True), ("pending-sriov", False)):
        claim: dict[str, Any] = {
            "apiVersion": DRA_API, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [
                {"name": "vfs", "exactly": {"deviceClassName": DRIVER, "count": 2}}]}},
        }  # fmt: skip
        if allocated:
            claim["status"] = {"allocation": {"devices": {"results": [
                {"request": "vfs", "driver": DRIVER, "pool": NODE, "device": f"vf{i}"}
                for i in (0, 1)]}}}  # fmt: skip
        kubesim.create(claim)


def _claiming_pod(kubesim: KubeSim, name: str, claim: str) -> str:
    """A pod on the test node with two ``sriov-net`` attachments and the claim in its status
    (the resource-claim controller writes it before the pod is scheduled)."""
    pod = kubesim.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {NETWORKS: "sriov-net,sriov-net"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}],
                 "resourceClaims": [{"name": "sriov", "resourceClaimTemplateName": "sriov"}]},
        "status": {"phase": "Pending",
                   "resourceClaimStatuses": [{"name": "sriov", "resourceClaimName": claim}]},
    })  # fmt: skip
    return str(pod["metadata"]["uid"])


def _dra_requests(kubesim: KubeSim) -> tuple[int, int]:
    return (
        kubesim.stats.count("get", "resourceclaims"),
        kubesim.stats.count("list", "resourceslices"),
    )


async def test_claimed_devices_reach_the_delegates_in_sorted_order(
    start_daemon: StartDaemon, kubesim: KubeSim, netns: MakeNetns, shim_path: Path,
    workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    bin_dir, record = _recorder(workdir)
    _seed_dra(kubesim)
    uid = _claiming_pod(kubesim, "web", "web-sriov")
    plain_uid = create_pod(kubesim, "plain", **{NETWORKS: "sriov-net"})
    daemon = await start_kube(
        start_daemon, kubesim, workdir, conflist_file,
        binDir=str(bin_dir), kubeletPodResourcesSocket=str(workdir / "absent.sock"),
        deviceCheckpointFile=str(workdir / "absent-checkpoint"),
    )  # fmt: skip

    env = uid_env(await netns(), "web", uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=env)
    assert added.returncode == 0, added
    seen = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(s["_ifname"], s.get("deviceID")) for s in seen] == [
        ("net1", "0000:03:00.1"),  # sorted: the slice lists vf0 (…:00.2) first
        ("net2", "0000:03:00.2"),
    ]
    assert _dra_requests(kubesim) == (1, 1)  # one claim GET, one LIST for the driver
    (listing,) = [r for r in kubesim.stats.requests() if r.resource == "resourceslices"]
    assert parse_qs(listing.query) == {
        "fieldSelector": [f"spec.nodeName={NODE},spec.driver={DRIVER}"]
    }
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=env)).returncode == 0

    # A pod without claims: its NAD still names the resource, and no DRA request is made.
    record.unlink()
    plain_env = uid_env(await netns(), "plain", plain_uid)
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=plain_env)
    assert added.returncode == 0, added
    (seen_plain,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert "deviceID" not in seen_plain
    assert _dra_requests(kubesim) == (1, 1)
    assert (await run_shim(shim_path, "DEL", shim_config(daemon), env=plain_env)).returncode == 0


async def test_an_unallocated_claim_fails_the_add(
    start_daemon: StartDaemon, kubesim: KubeSim, netns: MakeNetns, shim_path: Path,
    workdir: Path, conflist_file: Path,
) -> None:  # fmt: skip
    bin_dir, record = _recorder(workdir)
    _seed_dra(kubesim)
    uid = _claiming_pod(kubesim, "waiting", "pending-sriov")
    daemon = await start_kube(
        start_daemon, kubesim, workdir, conflist_file,
        binDir=str(bin_dir), kubeletPodResourcesSocket=str(workdir / "absent.sock"),
        deviceCheckpointFile=str(workdir / "absent-checkpoint"),
    )  # fmt: skip
    added = await run_shim(
        shim_path, "ADD", shim_config(daemon), env=uid_env(await netns(), "waiting", uid)
    )
    assert added.returncode == 1
    error = added.json()
    assert error["msg"].endswith(
        f"Multus: [default/waiting/{uid}]: error loading k8s delegates k8s args: "
        "TryLoadPodDelegates: error in getting k8s network for pod: GetNetworkDelegates: failed "
        "getting the delegate: getKubernetesDelegate: failed to get resourceMap from DRA client: "
        "claim pending-sriov has no device allocation"
    )
    assert error["code"] == 4
    assert not record.exists()  # delegates are resolved before any runs
