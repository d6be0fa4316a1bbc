"""DRA devices in the resource map (``multusd.k8s.dra``), against a fake API that records what
it is asked: upstream HEAD's ``pkg/draclient`` semantics (attributes, skips, errors and their
texts, the merge with the kubelet's map and its sorting, one read per claim and per driver),
the 20 s bound, and the trimmed pod (JSON and protobuf) that carries the claims to it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cni_shim.errors import INTERNAL, INVALID_ENVIRONMENT, TRY_AGAIN_LATER, CNIError
from multusd.k8s import dra, kproto
from multusd.k8s.devices import device_map_for_pod_object
from multusd.k8s.errors import NotFound, ServerError
from multusd.k8s.names import checked_name
from multusd.k8s.store import trim_pod
from multusd.kubesim import podproto, protoencode

PREFIX = "getKubernetesDelegate: failed to get resourceMap from DRA client: "
SRIOV = "sriov.example.com"
GPU = "gpu.example.com"
NODE = "node-1"
Obj = dict[str, Any]


class FakeApi:
    """``dra.ClaimsApi`` over dicts; records every call; a claim or a list may be an
    exception to raise, and ``delay`` holds each call (the 20 s bound's test)."""

    def __init__(self, claims: Mapping[str, Any], slices: list[Obj], delay: float = 0.0) -> None:
        self.claims = dict(claims)
        self.slices = slices
        self.delay = delay
        self.calls: list[tuple[str, str]] = []

    async def get_resource_claim(
        self, namespace: str, name: str, *, timeout: float | None = None
    ) -> Obj:
        self.calls.append(("get", f"{namespace}/{name}"))
        await asyncio.sleep(self.delay)
        checked_name(name)
        claim = self.claims.get(name)
        if claim is None:
            raise NotFound(f'resourceclaims.resource.k8s.io "{name}" not found', reason="NotFound")
        if isinstance(claim, Exception):
            raise claim
        return claim  # type: ignore[no-any-return]

    async def list_resource_slices(
        self, field_selector: str, *, timeout: float | None = None
    ) -> Obj:
        self.calls.append(("list", field_selector))
        await asyncio.sleep(self.delay)
        terms = dict(term.split("=", 1) for term in field_selector.split(","))
        items = [
            s
            for s in self.slices
            if all((s["spec"].get(k.removeprefix("spec.")) or "") == v for k, v in terms.items())
        ]
        return {"kind": "ResourceSliceList", "items": items}

    def request_url(self, path: str, params: Mapping[str, str] | None = None) -> str:
        query = "&".join(f"{k}={v}" for k, v in (params or {}).items())
        return f"https://api{path}" + (f"?{query}" if query else "")


def device(name: str, device_id: str | None, resource: str | None, **more: Obj) -> Obj:
    attributes: Obj = dict(more)
    if device_id is not None:
        attributes[dra.DEVICE_ID_ATTRIBUTE] = {"string": device_id}
    if resource is not None:
        attributes[dra.RESOURCE_NAME_ATTRIBUTE] = {"string": resource}
    return {"name": name, "attributes": attributes}


def resource_slice(driver: str, pool: str, *devices: Obj, node: str | None = NODE) -> Obj:
    spec: Obj = {"driver": driver, "pool": {"name": pool}, "devices": list(devices)}
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": f"{node}-{driver}-{pool}"}, "spec": spec}


def claim(*results: tuple[str, str, str, str] | tuple[str, str, str]) -> Obj:
    """A claim allocated ``results``: (driver, pool, device[, request])."""
    entries = [
        {"request": r[3] if len(r) > 3 else "req", "driver": r[0], "pool": r[1], "device": r[2]}
        for r in results
    ]
    return {"status": {"allocation": {"devices": {"results": entries}}}}


def pod(*claim_names: str | None, extended: Obj | None = None, node: str = NODE) -> Obj:
    status: Obj = {
        "resourceClaimStatuses": [
            {"name": f"ref-{i}"} | ({} if n is None else {"resourceClaimName": n})
            for i, n in enumerate(claim_names)
        ]
    }
    if extended is not None:
        status["extendedResourceClaimStatus"] = extended
    return {
        "metadata": {"name": "web", "namespace": "ns", "uid": "u-1"},
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


async def mapped(api: FakeApi, the_pod: Obj, start: dict[str, list[str]] | None = None) -> Obj:
    devices = {k: list(v) for k, v in (start or {}).items()}
    await dra.add_claimed_devices(api, the_pod, devices)
    return devices


# --- the mapping ----------------------------------------------------------------------------


async def test_device_attributes_map_device_ids_to_resource_names() -> None:
    api = FakeApi(
        {"c": claim((SRIOV, "p", "vf1"), (SRIOV, "p", "vf0"), (SRIOV, "q", "vf0"))},
        [
            resource_slice(SRIOV, "p", device("vf0", "0000:03:00.2", "intel.com/sriov"),
                           device("vf1", "0000:03:00.1", "intel.com/sriov")),
            resource_slice(SRIOV, "q", device("vf0", "0000:04:00.1", "intel.com/other")),
        ],
    )  # fmt: skip
    assert await mapped(api, pod("c")) == {
        "intel.com/sriov": ["0000:03:00.1", "0000:03:00.2"],  # in the claim's order
        "intel.com/other": ["0000:04:00.1"],
    }
    assert api.calls == [
        ("get", "ns/c"),
        ("list", f"spec.nodeName={NODE},spec.driver={SRIOV}"),  # once for the driver
    ]


async def test_only_string_attributes_count() -> None:
    """v1 attributes are ``{"string": ...}``, ``{"int": ...}``, ...: only ``string`` is read;
    a device whose device ID is another type has none, and is skipped."""
    int_id = {
        "name": "vf0",
        "attributes": {
            dra.DEVICE_ID_ATTRIBUTE: {"int": 7},
            dra.RESOURCE_NAME_ATTRIBUTE: {"string": "r"},
        },
    }
    version_name = {
        "name": "vf1",
        "attributes": {
            dra.DEVICE_ID_ATTRIBUTE: {"string": "id1"},
            dra.RESOURCE_NAME_ATTRIBUTE: {"version": "1.0.0"},
        },
    }
    api = FakeApi({"c": claim((SRIOV, "p", "vf0"), (SRIOV, "p", "vf1"), (SRIOV, "p", "vf2"))},
                  [resource_slice(SRIOV, "p", int_id, version_name,
                                  device("vf2", "id2", "r", other={"bool": True}))])  # fmt: skip
    assert await mapped(api, pod("c")) == {"r": ["id2"]}


async def test_device_map_appends_to_the_kubelets_and_sorts(tmp_path: Path) -> None:
    """Upstream appends DRA's IDs to the kubelet map's entry, then sorts every entry
    (``types.SortDeviceIDs``): the NADs naming the resource take them in sorted order."""
    checkpoint = tmp_path / "kubelet_internal_checkpoint"
    checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": [{
        "PodUID": "u-1", "ContainerName": "c", "ResourceName": "intel.com/sriov",
        "DeviceIDs": {"0": ["0000:05:00.1"]},
    }]}}))  # fmt: skip
    api = FakeApi(
        {"c": claim((SRIOV, "p", "vf0"), (SRIOV, "p", "vf1"))},
        [resource_slice(SRIOV, "p", device("vf0", "0000:09:00.1", "intel.com/sriov"),
                        device("vf1", "0000:01:00.1", "intel.com/sriov"))],
    )  # fmt: skip
    devices = await device_map_for_pod_object(
        pod("c"), claims=api, socket_path=str(tmp_path / "absent.sock"),
        checkpoint_path=str(checkpoint),
    )  # fmt: skip
    assert devices.devices("intel.com/sriov") == ("0000:01:00.1", "0000:05:00.1", "0000:09:00.1")
    assert [devices.next_device("intel.com/sriov") for _ in range(4)] == [
        "0000:01:00.1", "0000:05:00.1", "0000:09:00.1", "",
    ]  # fmt: skip


async def test_a_pod_without_claims_costs_no_request(tmp_path: Path) -> None:
    api = FakeApi({}, [])
    plain = {"metadata": {"name": "web", "namespace": "ns", "uid": "u"}, "spec": {}}
    for the_pod in (
        plain,
        plain | {"status": {}},
        plain | {"status": {"resourceClaimStatuses": []}},
    ):
        devices = await device_map_for_pod_object(
            the_pod, claims=api, socket_path=str(tmp_path / "absent.sock"),
            checkpoint_path=str(tmp_path / "absent"),
        )  # fmt: skip
        assert len(devices) == 0
    assert api.calls == []
    assert not dra.has_claims(plain)
    assert dra.has_claims(pod("c"))
    assert dra.has_claims(plain | {"status": {"extendedResourceClaimStatus": {}}})


async def test_missing_allocation_fails_the_add() -> None:
    for unallocated in ({}, {"status": {}}, {"status": {"allocation": None}},
                        {"status": {"allocation": {"devices": {}}}},
                        {"status": {"allocation": {"devices": {"results": []}}}}):  # fmt: skip
        api = FakeApi({"c": unallocated}, [])
        with pytest.raises(CNIError) as caught:
            await mapped(api, pod("c"))
        assert caught.value.msg == PREFIX + "claim c has no device allocation"
        assert caught.value.code == INVALID_ENVIRONMENT
        assert api.calls == [("get", "ns/c")]


async def test_device_in_no_slice_is_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A result no slice has (or that has no device ID, a GPU in an SR-IOV claim) and one
    without a resource name are skipped; the claim's other devices still count."""
    api = FakeApi(
        {"c": claim((SRIOV, "p", "gone"), (SRIOV, "p", "noid"), (SRIOV, "p", "nores"),
                    (SRIOV, "p", "vf0"))},
        [resource_slice(SRIOV, "p", device("noid", None, "r"), device("nores", "id-x", None),
                        device("vf0", "id-0", "r"))],
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, "multusd.k8s.dra"):
        assert await mapped(api, pod("c")) == {"r": ["id-0"]}
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        f"GetPodResourceMap: skipping allocation result for claim c (driver={SRIOV} pool=p "
        "device=gone): device not in any matching resource slice: device gone not found for "
        f"claim resource {SRIOV}/p in any matching resource slice",
        f"GetPodResourceMap: skipping allocation result for claim c (driver={SRIOV} pool=p "
        "device=noid): device not in any matching resource slice: device noid not found for "
        f"claim resource {SRIOV}/p in any matching resource slice",
        f"GetPodResourceMap: skipping allocation result for claim c (driver={SRIOV} pool=p "
        'device=nores): no "k8s.cni.cncf.io/resourceName" (only devices published for CNI are '
        "mapped)",
    ]


async def test_claim_that_maps_nothing_keeps_the_kubelets_entries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FakeApi(
        {"c": claim((GPU, "g", "gpu0"))}, [resource_slice(GPU, "g", device("gpu0", None, None))]
    )
    with caplog.at_level(logging.WARNING, "multusd.k8s.dra"):
        assert await mapped(api, pod("c"), {"intel.com/sriov": ["k1"]}) == {
            "intel.com/sriov": ["k1"]
        }
    assert "claim c had no allocation results mapped for Multus" in caplog.records[-1].getMessage()


async def test_wrong_driver_or_pool_or_node_does_not_match() -> None:
    """Slices are listed per driver on the pod's node, and the device is looked up by the
    slice's own driver and pool: the same device name elsewhere is not the allocated one."""
    api = FakeApi(
        {"c": claim((SRIOV, "p", "vf0"))},
        [
            resource_slice(GPU, "p", device("vf0", "gpu-id", "r")),  # another driver
            resource_slice(SRIOV, "other-pool", device("vf0", "pool-id", "r")),
            resource_slice(SRIOV, "p", device("vf0", "node-id", "r"), node="node-2"),
            resource_slice(SRIOV, "p", device("vf0", "global-id", "r"), node=None),
        ],
    )
    assert await mapped(api, pod("c")) == {}
    assert api.calls[1] == ("list", f"spec.nodeName={NODE},spec.driver={SRIOV}")

    # A server that ignored the driver selector still cannot mix drivers up.
    class Unselective(FakeApi):
        async def list_resource_slices(
            self, field_selector: str, *, timeout: float | None = None
        ) -> Obj:
            self.calls.append(("list", field_selector))
            return {"items": self.slices}

    api = Unselective(
        {"c": claim((SRIOV, "p", "vf0"))}, [resource_slice(GPU, "p", device("vf0", "x", "r"))]
    )
    assert await mapped(api, pod("c")) == {}


async def test_pod_without_a_node_lists_by_driver_only() -> None:
    api = FakeApi({"c": claim((SRIOV, "p", "vf0"))},
                  [resource_slice(SRIOV, "p", device("vf0", "id", "r"), node=None)])  # fmt: skip
    assert await mapped(api, pod("c", node="")) == {"r": ["id"]}
    assert api.calls[1] == ("list", f"spec.driver={SRIOV}")


async def test_one_read_per_claim_and_per_driver() -> None:
    api = FakeApi(
        {"a": claim((SRIOV, "p", "vf0"), (GPU, "g", "gpu0")), "b": claim((SRIOV, "p", "vf1"))},
        [resource_slice(SRIOV, "p", device("vf0", "id0", "r"), device("vf1", "id1", "r")),
         resource_slice(GPU, "g", device("gpu0", "gid", "g"))],
    )  # fmt: skip
    assert await mapped(api, pod("a", "b", "a")) == {
        "r": ["id0", "id1", "id0"],  # a claim named twice counts twice, as upstream's loop does
        "g": ["gid", "gid"],
    }
    assert api.calls == [
        ("get", "ns/a"),
        ("list", f"spec.nodeName={NODE},spec.driver={SRIOV}"),
        ("list", f"spec.nodeName={NODE},spec.driver={GPU}"),
        ("get", "ns/b"),
    ]


async def test_claim_status_without_a_claim_name_is_skipped() -> None:
    api = FakeApi(
        {"c": claim((SRIOV, "p", "vf0"))}, [resource_slice(SRIOV, "p", device("vf0", "id", "r"))]
    )
    assert await mapped(api, pod(None, "c")) == {"r": ["id"]}
    assert [c for c in api.calls if c[0] == "get"] == [("get", "ns/c")]


# --- API failures and the 20 s bound --------------------------------------------------------


async def test_api_errors_read_as_client_go_prints_them() -> None:
    api = FakeApi({}, [])
    with pytest.raises(CNIError) as caught:
        await mapped(api, pod("missing"))
    assert caught.value.msg == PREFIX + 'resourceclaims.resource.k8s.io "missing" not found'
    assert caught.value.code == INTERNAL

    api = FakeApi({"c": ServerError("etcdserver: request timed out", reason="InternalError")}, [])
    with pytest.raises(CNIError) as caught:
        await mapped(api, pod("c"))
    assert caught.value.msg == PREFIX + "etcdserver: request timed out"
    assert caught.value.code == TRY_AGAIN_LATER

    with pytest.raises(CNIError) as caught:  # a pointer to "": client-go's own refusal
        await mapped(FakeApi({}, []), pod(""))
    assert caught.value.msg == PREFIX + "resource name may not be empty"


async def test_all_reads_share_one_deadline() -> None:
    """Upstream's 20 s ``context.WithTimeout`` covers every read: three 0.2 s reads under a
    0.5 s bound fail on the third, as Go's ``*url.Error`` with the context's error."""
    api = FakeApi(
        {"c": claim((SRIOV, "p", "vf0"), (GPU, "g", "gpu0"))},
        [resource_slice(SRIOV, "p", device("vf0", "id", "r")), resource_slice(GPU, "g")],
        delay=0.2,
    )
    devices: dict[str, list[str]] = {}
    with pytest.raises(CNIError) as caught:
        await dra.add_claimed_devices(api, pod("c"), devices, timeout=0.5)
    assert caught.value.msg == (
        PREFIX + f'Get "https://api/apis/resource.k8s.io/v1/resourceslices?fieldSelector='
        f'spec.nodeName={NODE},spec.driver={GPU}": context deadline exceeded'
    )
    assert caught.value.code == TRY_AGAIN_LATER
    assert dra.DRA_TIMEOUT == 20.0


# --- extended resources ---------------------------------------------------------------------


def extended(claim_name: str, *mappings: tuple[str, str]) -> Obj:
    return {
        "resourceClaimName": claim_name,
        "requestMappings": [
            {"containerName": "c", "requestName": req, "resourceName": res} for req, res in mappings
        ],
    }


async def test_extended_resource_claim_keys_by_its_mappings() -> None:
    api = FakeApi(
        {"ext": claim((SRIOV, "p", "vf0", "r0"), (SRIOV, "p", "vf1", "r1"),
                      (SRIOV, "p", "vf2", "r1"))},
        [resource_slice(SRIOV, "p", device("vf0", "id0", "example.com/port1"),
                        device("vf1", "id1", "example.com/port2"),
                        device("vf2", "id2", "example.com/port2"))],
    )  # fmt: skip
    the_pod = pod(
        extended=extended("ext", ("r0", "example.com/port1"), ("r1", "example.com/port2"))
    )
    assert await mapped(api, the_pod) == {
        "example.com/port1": ["id0"],
        "example.com/port2": ["id1", "id2"],
    }


@pytest.mark.parametrize(
    ("slice_device", "mapping", "message"),
    [
        (device("vf0", "id0", "example.com/other"), ("r0", "example.com/port"),
         'device vf0: k8s.cni.cncf.io/resourceName is "example.com/other" but extended resource '
         'mapping for request "r0" is "example.com/port"'),
        (device("vf0", "id0", None), ("r0", "example.com/port"),
         "device vf0 missing required attribute k8s.cni.cncf.io/resourceName (must match NAD "
         'k8s.v1.cni.cncf.io/resourceName and extended mapping "example.com/port")'),
        (device("vf0", None, "example.com/port"), ("r0", "example.com/port"),
         "device not in any matching resource slice: device vf0 not found for claim resource "
         f"{SRIOV}/p in any matching resource slice"),
        (device("vf0", "id0", "example.com/port"), ("r9", "example.com/port"),
         "request r9 not found in claim ext"),
    ],
)  # fmt: skip
async def test_extended_resource_misses_are_errors(
    slice_device: Obj, mapping: tuple[str, str], message: str
) -> None:
    api = FakeApi(
        {"ext": claim((SRIOV, "p", "vf0", "r0"))}, [resource_slice(SRIOV, "p", slice_device)]
    )
    the_pod = pod(extended=extended("ext", mapping))
    del the_pod["status"]["resourceClaimStatuses"]
    with pytest.raises(CNIError) as caught:
        await mapped(api, the_pod)
    assert caught.value.msg == PREFIX + message
    assert caught.value.code == INVALID_ENVIRONMENT


# --- the pod that carries the claims --------------------------------------------------------


def full_pod() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "ns", "uid": "u-1", "resourceVersion": "5"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}],
                 "resourceClaims": [{"name": "sriov", "resourceClaimTemplateName": "t"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "resourceClaimStatuses": [{"name": "sriov", "resourceClaimName": "web-sriov-x7k2p"},
                                      {"name": "unneeded"}],
            "extendedResourceClaimStatus": {
                "requestMappings": [{"containerName": "c", "resourceName": "example.com/port",
                                     "requestName": "container-0-request-0"}],
                "resourceClaimName": "web-extended-resources-abcde",
            },
        },
    }  # fmt: skip


def test_trimmed_pod_keeps_the_claims_and_protobuf_decodes_the_same() -> None:
    expected_status = {
        "resourceClaimStatuses": [
            {"name": "sriov", "resourceClaimName": "web-sriov-x7k2p"},
            {"name": "unneeded"},
        ],
        "extendedResourceClaimStatus": {
            "requestMappings": [
                {"requestName": "container-0-request-0", "resourceName": "example.com/port"}
            ],
            "resourceClaimName": "web-extended-resources-abcde",
        },
    }
    trimmed = trim_pod(full_pod())
    assert trimmed["status"] == expected_status
    wire = protoencode.wrap("Pod", podproto.pod_message(full_pod()))
    assert kproto.decode_pod(wire) == trimmed


def test_pods_without_claims_have_no_status_when_trimmed() -> None:
    plain = full_pod()
    plain["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    assert "status" not in trim_pod(plain)
    assert "status" not in kproto.decode_pod(protoencode.wrap("Pod", podproto.pod_message(plain)))
