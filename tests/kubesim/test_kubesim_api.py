"""API details clients depend on, checked over raw HTTP."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from multusd.kubesim import KubeSim


def pod(name: str, **extra_meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **extra_meta},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


async def test_discovery_documents(kubesim: KubeSim, http: aiohttp.ClientSession):
    async with http.get("/version") as resp:
        assert (await resp.json())["major"] == "1"
    async with http.get("/api") as resp:
        doc = await resp.json()
    assert doc["kind"] == "APIVersions" and doc["versions"] == ["v1"]
    async with http.get("/apis") as resp:
        groups = {g["name"] for g in (await resp.json())["groups"]}
    assert groups == {
        "k8s.cni.cncf.io",
        "events.k8s.io",
        "resource.k8s.io",
        "certificates.k8s.io",
    }
    async with http.get("/apis/k8s.cni.cncf.io/v1") as resp:
        doc = await resp.json()
    (nad,) = doc["resources"]
    assert nad["name"] == "network-attachment-definitions"
    assert nad["shortNames"] == ["net-attach-def"]
    assert nad["namespaced"] is True
    async with http.get("/api/v1") as resp:
        names = {r["name"] for r in (await resp.json())["resources"]}
    assert {"pods", "pods/status", "namespaces", "events"} <= names
    async with http.get("/apis/nope.io/v1") as resp:
        assert resp.status == 404


async def test_server_set_metadata(kubesim: KubeSim, http: aiohttp.ClientSession):
    body = pod("", generateName="web-", uid="client-set", resourceVersion="")
    async with http.post("/api/v1/namespaces/default/pods", json=body) as resp:
        assert resp.status == 201
        created = await resp.json()
    meta = created["metadata"]
    assert meta["name"].startswith("web-") and len(meta["name"]) == len("web-") + 5
    assert meta["uid"] != "client-set"
    assert meta["namespace"] == "default"
    assert meta["creationTimestamp"].endswith("Z")
    assert int(meta["resourceVersion"]) == kubesim.store.resource_version
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


@pytest.mark.parametrize(
    ("body", "code", "reason"),
    [
        (pod("Bad_Name"), 422, "Invalid"),
        (pod(""), 422, "Invalid"),
        (pod("x", labels={"app": True}), 400, "BadRequest"),
        (pod("x", resourceVersion="5"), 400, "BadRequest"),
        (pod("x", namespace="other"), 400, "BadRequest"),
        ({"apiVersion": "v2", "kind": "Pod", "metadata": {"name": "x"}}, 400, "BadRequest"),
    ],
)
async def test_create_rejections(
    http: aiohttp.ClientSession, body: dict[str, Any], code: int, reason: str
):
    async with http.post("/api/v1/namespaces/default/pods", json=body) as resp:
        assert resp.status == code
        status = await resp.json()
    assert (status["kind"], status["status"], status["reason"], status["code"]) == (
        "Status", "Failure", reason, code,
    )  # fmt: skip


async def test_unconditional_update_rules(kubesim: KubeSim, http: aiohttp.ClientSession):
    """Pods may be PUT without a resourceVersion; custom resources may not (422)."""
    kubesim.create(pod("p"))
    body = kubesim.get("pods", "default", "p")
    del body["metadata"]["resourceVersion"]
    body["metadata"]["labels"] = {"a": "b"}
    async with http.put("/api/v1/namespaces/default/pods/p", json=body) as resp:
        assert resp.status == 200
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "n"},
        "spec": {"config": "{}"},
    }
    kubesim.create(nad)
    url = "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/n"
    async with http.put(url, json=nad) as resp:
        assert resp.status == 422
    # An update that changes nothing keeps the version (and fires no watch event).
    current = kubesim.get("pods", "default", "p")
    async with http.put("/api/v1/namespaces/default/pods/p", json=current) as resp:
        assert (await resp.json())["metadata"]["resourceVersion"] == current["metadata"][
            "resourceVersion"
        ]


async def test_watch_from_the_future_is_an_error_event(
    kubesim: KubeSim, http: aiohttp.ClientSession
):
    future = kubesim.store.resource_version + 100
    async with http.get(f"/api/v1/pods?watch=1&resourceVersion={future}") as resp:
        assert resp.status == 200
        lines = (await resp.read()).splitlines()
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 504


async def test_remaining_count_only_without_selectors(
    kubesim: KubeSim, http: aiohttp.ClientSession
):
    for i in range(4):
        kubesim.create(pod(f"p{i}", labels={"app": "x"}))
    async with http.get("/api/v1/namespaces/default/pods?limit=1") as resp:
        meta = (await resp.json())["metadata"]
    assert meta["remainingItemCount"] == 3 and meta["continue"]
    async with http.get("/api/v1/namespaces/default/pods?limit=1&labelSelector=app%3Dx") as resp:
        meta = (await resp.json())["metadata"]
    assert "remainingItemCount" not in meta and meta["continue"]
    async with http.get("/api/v1/namespaces/default/pods?continue=garbage") as resp:
        assert resp.status == 400


async def test_namespace_delete_takes_contents(kubesim: KubeSim, http: aiohttp.ClientSession):
    kubesim.seed(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}},
            pod("p", namespace="gone"),
        ]
    )
    async with http.delete("/api/v1/namespaces/gone") as resp:
        assert resp.status == 200
        assert (await resp.json())["kind"] == "Namespace"
    async with http.get("/api/v1/namespaces/gone/pods/p") as resp:
        assert resp.status == 404


async def test_delete_preconditions(kubesim: KubeSim, http: aiohttp.ClientSession):
    kubesim.create(pod("p"))
    options = {"preconditions": {"uid": "not-the-uid"}}
    async with http.delete("/api/v1/namespaces/default/pods/p", json=options) as resp:
        assert resp.status == 409
    uid = kubesim.get("pods", "default", "p")["metadata"]["uid"]
    async with http.delete(
        "/api/v1/namespaces/default/pods/p", json={"preconditions": {"uid": uid}}
    ) as resp:
        assert resp.status == 200


async def test_a_body_with_no_content_type_is_json(kubesim: KubeSim, http: aiohttp.ClientSession):
    """kube-apiserver reads a create, update or DeleteOptions body sent with no Content-Type
    as JSON, its first serializer (kubectl 1.20's ``create namespace`` sends one so); a PATCH
    has no default type (415), and a type it does not know is a 415 too."""
    url = "/api/v1/namespaces/default/pods"
    bare = {"skip_auto_headers": ["Content-Type"]}
    async with http.post(url, data=json.dumps(pod("p")), **bare) as resp:
        assert resp.status == 201, await resp.text()
    assert kubesim.stats.requests()[-1].body_type == ""
    body = kubesim.get("pods", "default", "p")
    body["metadata"]["labels"] = {"app": "web"}
    async with http.put(f"{url}/p", data=json.dumps(body), **bare) as resp:
        assert resp.status == 200, await resp.text()
    assert kubesim.get("pods", "default", "p")["metadata"]["labels"] == {"app": "web"}

    merge = json.dumps({"metadata": {"labels": {"app": "db"}}})
    async with http.patch(f"{url}/p", data=merge, **bare) as resp:
        assert resp.status == 415
    octets = {"Content-Type": "application/octet-stream"}
    async with http.post(url, data=json.dumps(pod("q")), headers=octets) as resp:
        assert resp.status == 415
        assert "(got 'application/octet-stream')" in (await resp.json())["message"]

    options = json.dumps({"preconditions": {"uid": "not-the-uid"}})
    async with http.delete(f"{url}/p", data=options, **bare) as resp:
        assert resp.status == 409  # the options were read: their precondition failed


async def test_events_k8s_io_group(kubesim: KubeSim, http: aiohttp.ClientSession):
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "web.1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "multus",
        "reportingInstance": "multus-node1",
        "action": "Add",
        "reason": "AddedInterface",
        "regarding": {"kind": "Pod", "namespace": "default", "name": "web"},
        "type": "Normal",
    }
    async with http.post("/apis/events.k8s.io/v1/namespaces/default/events", json=event) as resp:
        assert resp.status == 201
    async with http.get("/apis/events.k8s.io/v1/events") as resp:
        listed = await resp.json()
    assert listed["kind"] == "EventList" and listed["apiVersion"] == "events.k8s.io/v1"
    assert [e["metadata"]["name"] for e in listed["items"]] == ["web.1"]
    assert kubesim.stats.count("create", "events") == 1


LIMIT = 262144  # kube-apiserver's TotalAnnotationSizeLimitB
TOO_LONG = "Too long: must have at most 262144 bytes"
PODS = "/api/v1/namespaces/default/pods"


def _annotations(total: int, char: str = "x") -> dict[str, str]:
    """One annotation whose key and value hold ``total`` bytes (``char`` is 1 or 2 of them)."""
    key = "example.com/blob"
    return {key: char * ((total - len(key)) // len(char.encode()))}


async def _refused(resp: aiohttp.ClientResponse, kind: str, name: str) -> dict[str, Any]:
    """The 422 kube-apiserver answers for annotations past the limit; returns its details."""
    assert resp.status == 422, await resp.text()
    status = await resp.json()
    assert (status["reason"], status["code"]) == ("Invalid", 422)
    assert status["message"] == f'{kind} "{name}" is invalid: metadata.annotations: {TOO_LONG}'
    assert status["details"]["causes"] == [
        {"reason": "FieldValueTooLong", "message": TOO_LONG, "field": "metadata.annotations"}
    ]
    details: dict[str, Any] = status["details"]
    return details


async def test_annotations_past_256_kib_are_refused_on_create(http: aiohttp.ClientSession):
    """The limit holds for all annotations together, keys included, counted in bytes: at it is
    fine, one byte more is not, nor are fewer characters that take more bytes."""
    split = {"a.example/one": "x" * 100_000}
    split["b.example/two"] = "y" * (LIMIT - 2 * len("a.example/one") - 100_000)
    async with http.post(PODS, json=pod("at-limit", annotations=split)) as resp:
        assert resp.status == 201, await resp.text()
    async with http.post(PODS, json=pod("over", annotations=_annotations(LIMIT + 1))) as resp:
        details = await _refused(resp, "Pod", "over")
    assert (details["name"], details["kind"]) == ("over", "Pod")
    wide = _annotations(LIMIT + 2, "é")
    assert sum(len(k) + len(v) for k, v in wide.items()) < LIMIT  # in characters, it fits
    async with http.post(PODS, json=pod("wide", annotations=wide)) as resp:
        await _refused(resp, "Pod", "wide")
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "n", "annotations": _annotations(LIMIT + 1)},
        "spec": {"config": "{}"},
    }
    nads = "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions"
    async with http.post(nads, json=nad) as resp:
        details = await _refused(resp, "NetworkAttachmentDefinition.k8s.cni.cncf.io", "n")
    assert details["group"] == "k8s.cni.cncf.io"


async def test_annotations_past_256_kib_are_refused_on_update_and_patch(
    kubesim: KubeSim, http: aiohttp.ClientSession
):
    """A pod at the limit: a PUT, a merge PATCH of ``pods/status`` (how Multus writes its
    network-status), a JSON patch and a strategic merge patch that add to it are refused, and
    the stored pod stays as it was; a patch that takes some away is taken."""
    kubesim.create(pod("full", annotations=_annotations(LIMIT)))
    before = kubesim.get("pods", "default", "full")
    body = kubesim.get("pods", "default", "full")
    body["metadata"]["annotations"]["k"] = "v"
    async with http.put(f"{PODS}/full", json=body) as resp:
        await _refused(resp, "Pod", "full")
    status = {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/network-status": "[]"}}}
    json_patch = [{"op": "add", "path": "/metadata/annotations/k", "value": "v"}]
    for url, content_type, patch in (
        (f"{PODS}/full/status", "application/merge-patch+json", status),
        (f"{PODS}/full", "application/json-patch+json", json_patch),
        (f"{PODS}/full", "application/strategic-merge-patch+json", status),
    ):
        headers = {"Content-Type": content_type}
        async with http.patch(url, data=json.dumps(patch), headers=headers) as resp:
            await _refused(resp, "Pod", "full")
    assert kubesim.get("pods", "default", "full") == before
    smaller = {"metadata": {"annotations": _annotations(LIMIT - 100)}}
    smaller["metadata"]["annotations"]["k"] = "v"
    headers = {"Content-Type": "application/merge-patch+json"}
    async with http.patch(f"{PODS}/full", data=json.dumps(smaller), headers=headers) as resp:
        assert resp.status == 200, await resp.text()
