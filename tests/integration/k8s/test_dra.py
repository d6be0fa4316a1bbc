"""DRA reads through the real ``KubeClient`` against the API emulator: the requests the daemon
sends for a pod's claims (one GET per claim, one LIST per driver with the field selectors, as
the emulator's request log shows them), a 429 retried through the token bucket, the 20 s bound
as Go's URL error over the real URL, and the claims carried by a pod read as protobuf."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from cni_shim.errors import TRY_AGAIN_LATER, CNIError
from multusd.k8s import dra
from multusd.k8s.client import KubeClient, load_api_config
from multusd.k8s.devices import device_map_for_pod_object
from multusd.kubesim import ErrorRule, KubeSim, LatencyRule

NODE = "node-1"
SRIOV = "sriov.example.com"
RESOURCE = "intel.com/sriov"
PREFIX = "getKubernetesDelegate: failed to get resourceMap from DRA client: "
Obj = dict[str, Any]


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    async with KubeSim() as s:
        yield s


@pytest.fixture
async def client(sim: KubeSim, short_tmp: Path) -> AsyncIterator[KubeClient]:
    cfg = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "kubeconfig")), {})
    async with KubeClient(cfg) as c:
        yield c


def seed(sim: KubeSim) -> Obj:
    """A slice on this node and one on another, a claim allocated two VFs, and the pod."""
    for node, ids in ((NODE, ("0000:03:00.2", "0000:03:00.1")), ("node-2", ("9", "8"))):
        sim.create({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-sriov"},
            "spec": {"driver": SRIOV, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"vf{i}", "attributes": {
                         dra.DEVICE_ID_ATTRIBUTE: {"string": device_id},
                         dra.RESOURCE_NAME_ATTRIBUTE: {"string": RESOURCE},
                         "pciRoot": {"string": "0000:00"}}}
                         for i, device_id in enumerate(ids)]},
        })  # fmt: skip
    sim.create({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "web-sriov-x7k2p", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "vfs", "exactly": {
            "deviceClassName": "sriov", "count": 2}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "vfs", "driver": SRIOV, "pool": NODE, "device": f"vf{i}"}
            for i in (0, 1)]}}},
    })  # fmt: skip
    return sim.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}],
                 "resourceClaims": [{"name": "sriov", "resourceClaimTemplateName": "sriov"}]},
        "status": {"phase": "Pending",
                   "resourceClaimStatuses": [{"name": "sriov",
                                              "resourceClaimName": "web-sriov-x7k2p"}]},
    })  # fmt: skip


def dra_requests(sim: KubeSim) -> list[tuple[str, str, dict[str, list[str]]]]:
    return [
        (r.verb, r.path, parse_qs(r.query))
        for r in sim.stats.requests()
        if r.resource in ("resourceclaims", "resourceslices")
    ]


async def test_claims_reach_the_map_with_one_get_and_one_list(
    sim: KubeSim, client: KubeClient, short_tmp: Path
) -> None:
    seed(sim)
    # The pod as the daemon holds it: read as protobuf and trimmed, its claims kept.
    pod = await client.get("/api/v1/namespaces/default/pods/web")
    assert pod["status"] == {
        "resourceClaimStatuses": [{"name": "sriov", "resourceClaimName": "web-sriov-x7k2p"}]
    }
    assert sim.stats.requests()[-1].content_type.startswith("application/vnd.kubernetes.protobuf")
    devices = await device_map_for_pod_object(
        pod, claims=client, socket_path=str(short_tmp / "absent.sock"),
        checkpoint_path=str(short_tmp / "absent"),
    )  # fmt: skip
    assert devices.devices(RESOURCE) == ("0000:03:00.1", "0000:03:00.2")
    assert dra_requests(sim) == [
        ("get", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/web-sriov-x7k2p", {}),
        (
            "list",
            "/apis/resource.k8s.io/v1/resourceslices",
            {"fieldSelector": [f"spec.nodeName={NODE},spec.driver={SRIOV}"]},
        ),
    ]


async def test_a_throttled_read_is_retried_through_the_bucket(
    sim: KubeSim, client: KubeClient
) -> None:
    pod = seed(sim)
    sim.faults.errors.append(ErrorRule(429, verb="get", resource="resourceclaims", count=1,
                                       retry_after=0))  # fmt: skip
    devices: dict[str, list[str]] = {}
    await dra.add_claimed_devices(client, pod, devices)
    assert devices == {RESOURCE: ["0000:03:00.2", "0000:03:00.1"]}
    assert sim.stats.count_code(429, "get", "resourceclaims") == 1
    assert sim.stats.count("get", "resourceclaims") == 2


async def test_the_bound_ends_a_hanging_list_with_gos_url_error(
    sim: KubeSim, client: KubeClient
) -> None:
    pod = seed(sim)
    sim.faults.latency.append(LatencyRule(5.0, verb="list", resource="resourceslices"))
    with pytest.raises(CNIError) as caught:
        await dra.add_claimed_devices(client, pod, {}, timeout=0.5)
    assert caught.value.msg == (
        f'{PREFIX}Get "{sim.url}/apis/resource.k8s.io/v1/resourceslices?fieldSelector='
        f'spec.nodeName%3D{NODE}%2Cspec.driver%3D{SRIOV}": context deadline exceeded'
    )
    assert caught.value.code == TRY_AGAIN_LATER


async def test_a_missing_claim_reads_as_client_gos_not_found(
    sim: KubeSim, client: KubeClient
) -> None:
    pod = seed(sim)
    sim.delete("resourceclaims", "default", "web-sriov-x7k2p", group="resource.k8s.io")
    with pytest.raises(CNIError) as caught:
        await dra.add_claimed_devices(client, pod, {})
    assert caught.value.msg == (
        PREFIX + 'resourceclaims.resource.k8s.io "web-sriov-x7k2p" not found'
    )
