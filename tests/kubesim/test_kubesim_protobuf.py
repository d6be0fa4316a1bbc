"""Protobuf over HTTP for every built-in kind: bodies in (create, PUT, pods/status, DELETE
options) and answers out (every verb, errors included) when ``Accept`` asks for them."""

from __future__ import annotations

from typing import Any

import aiohttp

from multusd import protobuf
from multusd.k8s import kproto
from multusd.kubesim import KubeSim, kindproto, podproto, protodecode, protoencode
from multusd.kubesim.podproto import MSG, MSGS, STR, Table
from multusd.kubesim.resources import PODS

PROTOBUF = "application/vnd.kubernetes.protobuf"
SEND = {"Content-Type": PROTOBUF, "Accept": f"{PROTOBUF}, application/json"}
SEND_JSON_BACK = {"Content-Type": PROTOBUF, "Accept": "application/json"}


def body(obj: dict[str, Any], kind: str, api_version: str = "v1") -> bytes:
    table = kindproto.MESSAGES[(api_version, kind)]
    return protoencode.wrap(kind, podproto.message(obj, table), api_version)


async def read(resp: aiohttp.ClientResponse, kind: str, api_version: str = "v1") -> Any:
    """A response as a dict, whichever encoding it came in (protobuf read by our reader)."""
    data = await resp.read()
    if resp.content_type == "application/json":
        return await resp.json()
    assert resp.content_type == PROTOBUF
    if protobuf.unwrap(data)[1] == "Status":
        return kproto.decode_status(data)
    return protodecode.decode_object(data, api_version, kind)


def list_table(item: Table) -> Table:
    """A ``...List`` message: ListMeta = 1, items = 2 (the same tables, read as a list)."""
    return {"metadata": (1, MSG, {"resourceVersion": (2, STR, None)}), "items": (2, MSGS, item)}


POD = {
    "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80}]}]},
}


async def test_pod_create_put_status_and_delete_in_protobuf(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    url = "/api/v1/namespaces/default/pods"
    async with http.post(url, data=body(POD, "Pod"), headers=SEND) as resp:
        assert resp.status == 201 and resp.content_type == PROTOBUF
        created = await read(resp, "Pod")
    stored = kubesim.get("pods", "default", "web")
    assert created == stored
    assert stored["metadata"]["labels"] == {"app": "web"}
    assert stored["spec"]["containers"][0]["ports"] == [{"containerPort": 80}]
    assert stored["status"]["phase"] == "Pending"

    # PUT with the version read back: a label change, answered in JSON as asked.
    changed = dict(created, metadata=dict(created["metadata"], labels={"app": "web2"}))
    async with http.put(f"{url}/web", data=body(changed, "Pod"), headers=SEND_JSON_BACK) as resp:
        assert resp.status == 200 and resp.content_type == "application/json"
        updated = await resp.json()
    assert updated["metadata"]["labels"] == {"app": "web2"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])

    # pods/status, as a kubelet (or Multus's annotation write) would send it.
    status = dict(updated, status={"phase": "Running", "podIP": "10.0.0.7"})
    async with http.put(f"{url}/web/status", data=body(status, "Pod"), headers=SEND) as resp:
        assert resp.status == 200
        assert (await read(resp, "Pod"))["status"] == {"phase": "Running", "podIP": "10.0.0.7"}

    # A stale version is a 409, in protobuf as asked.
    async with http.put(f"{url}/web", data=body(changed, "Pod"), headers=SEND) as resp:
        assert resp.status == 409 and resp.content_type == PROTOBUF
        assert (await read(resp, "Pod"))["reason"] == "Conflict"

    # DELETE with protobuf DeleteOptions: a wrong uid precondition fails, then a plain one.
    options = kindproto.DELETE_OPTIONS
    wrong = protoencode.wrap(
        "DeleteOptions", podproto.message({"preconditions": {"uid": "x"}}, options)
    )
    async with http.delete(f"{url}/web", data=wrong, headers=SEND) as resp:
        assert resp.status == 409
        assert "Precondition failed: UID in precondition: x" in (await read(resp, "Pod"))["message"]
    dry = protoencode.wrap("DeleteOptions", podproto.message({"dryRun": ["All"]}, options))
    async with http.delete(f"{url}/web", data=dry, headers=SEND) as resp:
        assert resp.status == 400
    grace = protoencode.wrap("DeleteOptions", podproto.message({"gracePeriodSeconds": 0}, options))
    async with http.delete(f"{url}/web", data=grace, headers=SEND) as resp:
        assert resp.status == 200
        assert (await read(resp, "Pod"))["metadata"]["name"] == "web"
    assert kubesim.store.get(PODS, "default", "web") is None


async def test_namespace_and_events_in_protobuf(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    async with http.post(
        "/api/v1/namespaces", data=body({"metadata": {"name": "demo"}}, "Namespace"), headers=SEND
    ) as resp:
        assert resp.status == 201
        namespace = await read(resp, "Namespace")
    assert namespace["status"] == {"phase": "Active"}
    assert namespace["spec"] == {"finalizers": ["kubernetes"]}

    event = {
        "metadata": {"name": "web.1", "namespace": "demo"},
        "involvedObject": {"kind": "Pod", "namespace": "demo", "name": "web"},
        "reason": "AddedInterface", "message": "Add eth0", "type": "Normal", "count": 1,
        "source": {"component": "multus"}, "firstTimestamp": "2024-05-01T10:00:00Z",
        "eventTime": "2024-05-01T10:00:00.250000Z",
    }  # fmt: skip
    url = "/api/v1/namespaces/demo/events"
    async with http.post(url, data=body(event, "Event"), headers=SEND) as resp:
        assert resp.status == 201
    stored = kubesim.get("events", "demo", "web.1")
    assert {k: stored[k] for k in event if k != "metadata"} == {
        k: v for k, v in event.items() if k != "metadata"
    }
    v1 = {"metadata": {"name": "web.2"}, "reason": "R", "note": "n", "type": "Normal",
          "eventTime": "2024-05-01T10:00:00.000001Z", "reportingController": "multus",
          "reportingInstance": "node1", "action": "Add",
          "regarding": {"kind": "Pod", "name": "web", "namespace": "demo"}}  # fmt: skip
    url_v1 = "/apis/events.k8s.io/v1/namespaces/demo/events"
    async with http.post(url_v1, data=body(v1, "Event", "events.k8s.io/v1"), headers=SEND) as resp:
        assert resp.status == 201
        assert (await read(resp, "Event", "events.k8s.io/v1"))["note"] == "n"

    # A list in protobuf: the same Event table, read as the items of an EventList.
    async with http.get(url, headers={"Accept": PROTOBUF}) as resp:
        assert resp.content_type == PROTOBUF
        api_version, kind, raw = protobuf.unwrap(await resp.read())
    assert (api_version, kind) == ("v1", "EventList")
    listed = protodecode.decode_message(raw, 0, len(raw), list_table(kindproto.EVENT))
    assert [e["reason"] for e in listed["items"]] == ["AddedInterface"]
    assert listed["metadata"]["resourceVersion"] == str(kubesim.store.resource_version)

    # Deleting an event answers a Status (events do not return the object).
    async with http.delete(f"{url}/web.1", headers={"Accept": PROTOBUF}) as resp:
        assert resp.status == 200
        status = kproto.decode_status(await resp.read())
    assert status["status"] == "Success" and status["details"]["name"] == "web.1"


async def test_undecodable_body_gets_400_in_the_asked_encoding(
    http: aiohttp.ClientSession,
) -> None:
    url = "/api/v1/namespaces"
    async with http.post(url, data=b"k8s\x00\x0a\x05", headers=SEND) as resp:
        assert resp.status == 400 and resp.content_type == PROTOBUF
        status = kproto.decode_status(await resp.read())
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        "the object provided is unrecognized (must be of type Namespace): unexpected EOF "
        "(6b3873000a05)"
    )
    pod = protoencode.encode_pod({"metadata": {"name": "p"}})
    async with http.post(url, data=pod, headers=SEND_JSON_BACK) as resp:
        assert resp.status == 400
        assert (await resp.json())["message"] == (
            "the kind in the data (Pod) does not match the expected kind (Namespace)"
        )
