"""DRA's ``resource.k8s.io/v1`` kinds in the emulator, checked with kubectl: ``create -f`` of a
ResourceClaim (its status dropped, as the claim strategy drops it) and of ResourceSlices,
``get`` with kubectl's columns, ``get resourceslices --field-selector`` on ``spec.nodeName`` and
``spec.driver`` (and the apiserver's refusal of any other field), the claim's ``status``
subresource. Runs with the newest and the oldest kubectl (tests/kubesim/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from multusd.kubesim import KubeSim
from tests.kubesim.conftest import KubectlBinary

Kubectl = Callable[..., Awaitable[tuple[int, str, str]]]

CLAIM_YAML = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: sriov-claim
  namespace: default
spec:
  devices:
    requests:
    - name: vf
      exactly:
        deviceClassName: sriov.example.com
status:
  allocation:
    devices:
      results:
      - {request: vf, driver: sriov.example.com, pool: node-a, device: vf0}
"""

SLICES_YAML = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: node-a-sriov}
spec:
  driver: sriov.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
  devices:
  - name: vf0
    attributes:
      k8s.cni.cncf.io/deviceID: {string: "0000:03:00.1"}
      k8s.cni.cncf.io/resourceName: {string: intel.com/sriov}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: node-a-gpu}
spec:
  driver: gpu.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: node-b-sriov}
spec:
  driver: sriov.example.com
  nodeName: node-b
  pool: {name: node-b, generation: 1, resourceSliceCount: 1}
"""


def _names(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:]]


async def test_kubectl_creates_and_lists_claims_and_slices(
    kubesim: KubeSim, kubeconfig: Path, kubectl: Kubectl, kubectl_bin: KubectlBinary
) -> None:
    claim_file = kubeconfig.parent / "claim.yaml"
    claim_file.write_text(CLAIM_YAML)
    create = ["create", *kubectl_bin.apply_flags, "-f"]
    rc, out, err = await kubectl(kubeconfig, *create, str(claim_file))
    assert rc == 0, err
    assert "resourceclaim.resource.k8s.io/sriov-claim created" in out
    stored = kubesim.get("resourceclaims", "default", "sriov-claim", group="resource.k8s.io")
    assert "status" not in stored  # an API create drops it: the scheduler allocates

    rc, out, err = await kubectl(kubeconfig, "get", "resourceclaims")
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "STATE", "AGE"]
    assert row.split()[:2] == ["sriov-claim", "pending"]

    # What the scheduler does: the allocation, through the status subresource.
    stored["status"] = json.loads(json.dumps({"allocation": {"devices": {"results": [
        {"request": "vf", "driver": "sriov.example.com", "pool": "node-a", "device": "vf0"}]}},
        "reservedFor": [{"resource": "pods", "name": "web", "uid": "u"}]}))  # fmt: skip
    kubesim.update(stored, subresource="status")
    rc, out, err = await kubectl(kubeconfig, "get", "resourceclaim", "sriov-claim", "-o", "json")
    assert rc == 0, err
    assert json.loads(out)["status"]["allocation"]["devices"]["results"][0]["device"] == "vf0"
    rc, out, err = await kubectl(kubeconfig, "get", "resourceclaims")
    assert rc == 0, err
    assert out.splitlines()[1].split()[:2] == ["sriov-claim", "allocated,reserved"]

    slices_file = kubeconfig.parent / "slices.yaml"
    slices_file.write_text(SLICES_YAML)
    rc, out, err = await kubectl(kubeconfig, *create, str(slices_file))
    assert rc == 0, err
    assert "resourceslice.resource.k8s.io/node-b-sriov created" in out
    assert (
        kubesim.get("resourceslices", "", "node-a-sriov", group="resource.k8s.io")["metadata"][
            "generation"
        ]
        == 1
    )

    rc, out, err = await kubectl(
        kubeconfig, "get", "resourceslices", "--field-selector", "spec.nodeName=node-a"
    )
    assert rc == 0, err
    assert out.splitlines()[0].split() == ["NAME", "NODE", "DRIVER", "POOL", "AGE"]
    assert sorted(line.split()[:4] for line in out.splitlines()[1:]) == [
        ["node-a-gpu", "node-a", "gpu.example.com", "node-a"],
        ["node-a-sriov", "node-a", "sriov.example.com", "node-a"],
    ]
    selector = "spec.nodeName=node-a,spec.driver=sriov.example.com"
    rc, out, err = await kubectl(
        kubeconfig, "get", "resourceslices", "--field-selector", selector, "-o", "json"
    )
    assert rc == 0, err
    (item,) = json.loads(out)["items"]
    attributes = item["spec"]["devices"][0]["attributes"]
    assert attributes["k8s.cni.cncf.io/deviceID"] == {"string": "0000:03:00.1"}
    rc, out, err = await kubectl(
        kubeconfig, "get", "resourceslices", "--field-selector", "spec.driver!=gpu.example.com"
    )
    assert rc == 0, err
    assert sorted(_names(out)) == ["node-a-sriov", "node-b-sriov"]

    rc, out, err = await kubectl(
        kubeconfig, "get", "resourceslices", "--field-selector", "spec.allNodes=true"
    )
    assert rc == 1
    assert "field label not supported: spec.allNodes" in err


async def test_discovery_and_field_selectors_over_http(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    async with http.get("/apis/resource.k8s.io/v1") as resp:
        resources = {r["name"]: r for r in (await resp.json())["resources"]}
    assert set(resources) == {"resourceclaims", "resourceclaims/status", "resourceslices"}
    assert resources["resourceclaims"]["namespaced"] is True
    assert resources["resourceslices"]["namespaced"] is False
    assert resources["resourceslices"]["kind"] == "ResourceSlice"

    for node in ("node-a", None):
        spec = {"driver": "d.example.com", "pool": {"name": "p"}} | (
            {"nodeName": node} if node else {"allNodes": True}
        )
        kubesim.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": f"s-{node or 'global'}"}, "spec": spec})  # fmt: skip
    path = "/apis/resource.k8s.io/v1/resourceslices"
    for selector, expected in (
        ("spec.nodeName=node-a", ["s-node-a"]),
        ("spec.nodeName=", ["s-global"]),  # a slice without a node selects as ""
        ("spec.driver=d.example.com,metadata.name=s-global", ["s-global"]),
        ("spec.driver=other", []),
    ):
        async with http.get(path, params={"fieldSelector": selector}) as resp:
            assert resp.status == 200, selector
            assert [i["metadata"]["name"] for i in (await resp.json())["items"]] == expected
    claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    async with http.get(claims, params={"fieldSelector": "spec.nodeName=x"}) as resp:
        assert resp.status == 400
        assert (await resp.json())["message"] == "field label not supported: spec.nodeName"
