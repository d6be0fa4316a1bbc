"""Pure pieces: selectors, patches, store versions and history, tables, discovery shapes."""

from __future__ import annotations

import pytest

from multusd.kubesim.errors import ApiError
from multusd.kubesim.objects import prepare_create
from multusd.kubesim.patch import json_patch, merge_patch, strategic_merge_patch
from multusd.kubesim.resources import NADS, PODS, Registry
from multusd.kubesim.routes import DiscoveryPath, Target, parse
from multusd.kubesim.selectors import parse_field_selector, parse_label_selector
from multusd.kubesim.store import Store
from multusd.kubesim.tables import human_duration
from multusd.kubesim.watchcache import ADDED, DELETED, MODIFIED


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "db"}, False),
        ("app!=web", {}, True),
        ("app in (web, db),tier", {"app": "db", "tier": "x"}, True),
        ("app notin (web)", {"app": "web"}, False),
        ("!canary", {"canary": "1"}, False),
        ("example.com/role=edge", {"example.com/role": "edge"}, True),
        ("", {"any": "thing"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool):
    assert parse_label_selector(selector).matches(labels) is expected


@pytest.mark.parametrize("bad", ["app=(", "app in web", "=x", "a b"])
def test_bad_label_selectors_are_400(bad: str):
    with pytest.raises(ApiError) as err:
        parse_label_selector(bad)
    assert err.value.code == 400


def test_field_selectors():
    sel = parse_field_selector("spec.nodeName=n1,metadata.name!=x", PODS.selectable)
    assert sel.matches({"spec.nodeName": "n1", "metadata.name": "y"})
    assert not sel.matches({"spec.nodeName": "n1", "metadata.name": "x"})
    assert sel.exact("spec.nodeName") == "n1"
    escaped = parse_field_selector(r"metadata.name=a\,b", PODS.selectable)
    assert escaped.matches({"metadata.name": "a,b"})
    with pytest.raises(ApiError) as err:
        parse_field_selector("spec.nodeName=n1", NADS.selectable)
    assert err.value.code == 400
    assert err.value.message == "field label not supported: spec.nodeName"


def test_merge_patch_rfc7386():
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    assert merge_patch(target, {"a": "z", "c": {"f": None}}) == {"a": "z", "c": {"d": "e"}}
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}}  # input untouched


def test_json_patch_rfc6902():
    doc = {"metadata": {"labels": {"a": "1"}}, "list": [1, 2]}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
            {"op": "remove", "path": "/metadata/labels/a"},
            {"op": "add", "path": "/list/-", "value": 3},
            {"op": "replace", "path": "/list/0", "value": 0},
            {"op": "copy", "from": "/list", "path": "/copy"},
            {"op": "move", "from": "/copy", "path": "/moved"},
            {"op": "test", "path": "/moved/2", "value": 3},
        ],
    )
    assert out == {"metadata": {"labels": {"b/c": "2"}}, "list": [0, 2, 3], "moved": [0, 2, 3]}
    with pytest.raises(ApiError) as err:
        json_patch(doc, [{"op": "test", "path": "/list/0", "value": 9}])
    assert err.value.code == 422
    with pytest.raises(ApiError) as err:
        json_patch(doc, [{"op": "remove", "path": "/nope"}])
    assert err.value.code == 400
    with pytest.raises(ApiError):
        json_patch(doc, {"not": "a list"})


def test_strategic_merge_patch():
    pod = {
        "metadata": {"finalizers": ["a"], "labels": {"x": "1"}},
        "spec": {
            "containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}],
            "tolerations": [{"key": "k"}],
        },
    }
    out = strategic_merge_patch(
        pod,
        {
            "metadata": {"finalizers": ["b"], "labels": {"x": None, "y": "2"}},
            "spec": {
                "$setElementOrder/containers": [{"name": "c1"}, {"name": "c2"}],
                "containers": [{"name": "c2", "image": "new"}, {"name": "c1", "$patch": "delete"}],
                "tolerations": [{"key": "other"}],
            },
        },
    )
    assert out == {
        "metadata": {"finalizers": ["a", "b"], "labels": {"y": "2"}},
        "spec": {"containers": [{"name": "c2", "image": "new"}], "tolerations": [{"key": "other"}]},
    }
    replaced = strategic_merge_patch(pod, {"metadata": {"labels": {"$patch": "replace", "z": "3"}}})
    assert replaced["metadata"]["labels"] == {"z": "3"}


def _obj(name: str, **labels: str) -> dict[str, object]:
    return prepare_create(
        PODS,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}},
        "default",
    )


def test_store_versions_history_and_selector_transitions():
    store = Store(history_limit=3)
    a = store.create(PODS, _obj("a", app="x"))
    watcher = store.subscribe(
        PODS,
        namespace="default",
        labels=parse_label_selector("app=x"),
        fields=parse_field_selector("", PODS.selectable),
        since=a.rv,
    )
    obj = a.decode()
    obj["metadata"]["labels"] = {"app": "y"}
    b = store.update(PODS, obj, a.rv)
    assert b.rv == a.rv + 1
    obj = b.decode()
    obj["metadata"]["labels"] = {"app": "x"}
    c = store.update(PODS, obj, b.rv)
    d = store.delete(PODS, "default", "a")
    # Leaving the selector is a DELETED for this watcher, entering it an ADDED.
    assert [(i.type, i.rv) for i in watcher.take()] == [
        (DELETED, b.rv), (ADDED, c.rv), (DELETED, d.rv),
    ]  # fmt: skip
    with pytest.raises(ApiError) as err:
        store.update(PODS, obj, b.rv)
    assert err.value.code == 404
    # Four writes, window of three: the first write's predecessor is gone.
    with pytest.raises(ApiError) as err:
        store.subscribe(
            PODS, namespace=None, labels=parse_label_selector(""),
            fields=parse_field_selector("", PODS.selectable), since=a.rv - 1,
        )  # fmt: skip
    assert err.value.code == 410
    assert err.value.reason == "Expired"
    resumed = store.subscribe(
        PODS, namespace=None, labels=parse_label_selector(""),
        fields=parse_field_selector("", PODS.selectable), since=a.rv,
    )  # fmt: skip
    assert [i.type for i in resumed.take()] == [MODIFIED, MODIFIED, DELETED]


def test_conflict_on_stale_version():
    store = Store()
    a = store.create(PODS, _obj("a"))
    store.update(PODS, a.decode(), a.rv)
    with pytest.raises(ApiError) as err:
        store.update(PODS, a.decode(), a.rv)
    assert (err.value.code, err.value.reason) == (409, "Conflict")
    assert err.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on pods "a": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "reason": "Conflict",
        "details": {"name": "a", "kind": "pods"},
        "code": 409,
    }


def test_routes():
    reg = Registry()
    assert parse("/api", reg) == DiscoveryPath("", "")
    assert parse("/apis", reg) == DiscoveryPath(None, "")
    assert parse("/apis/k8s.cni.cncf.io/v1", reg) == DiscoveryPath("k8s.cni.cncf.io", "v1")
    t = parse("/api/v1/namespaces/ns1/pods/p/status", reg)
    assert isinstance(t, Target) and (t.rt, t.namespace, t.name, t.subresource) == (
        PODS, "ns1", "p", "status",
    )  # fmt: skip
    ns = parse("/api/v1/namespaces/ns1", reg)
    assert isinstance(ns, Target) and ns.rt.plural == "namespaces" and ns.name == "ns1"
    w = parse("/api/v1/watch/namespaces/ns1/pods", reg)
    assert isinstance(w, Target) and w.legacy_watch and w.name is None
    nad = parse("/apis/k8s.cni.cncf.io/v1/network-attachment-definitions", reg)
    assert isinstance(nad, Target) and nad.rt is NADS and nad.namespace is None
    for bad in ("/api/v1/pods/x", "/api/v1/namespaces/a/pods/b/exec", "/apis/x/v1/things"):
        with pytest.raises(ApiError):
            parse(bad, reg)


def test_human_duration():
    assert [human_duration(s) for s in (5, 119, 150, 3600, 90000, 864000)] == [
        "5s", "119s", "2m30s", "60m", "25h", "10d",
    ]  # fmt: skip
