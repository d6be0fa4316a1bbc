"""The hand-written Kubernetes protobuf codec: what it decodes equals ``trim_pod`` of the JSON
form, everything outside its schema is skipped whatever its wire type, broken input is a
``ValueError``, and watch frames survive any chunking."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multusd import protobuf
from multusd.k8s import kproto
from multusd.k8s.store import trim_pod
from multusd.kubesim import protoencode
from tests.kproto_fixtures import OFFICIAL_POD_TRIMMED, official_pod_bytes


def realistic_pod(i: int = 0, node: str | None = "node-1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "app", "image": "registry.example/app:1.2", "ports": [{"containerPort": 80}]},
            {"name": "sidecar", "image": "envoy:1.30"},
        ],
        "restartPolicy": "Always",
        "serviceAccountName": "default",
        "schedulerName": "default-scheduler",
        "tolerations": [{"key": "k", "operator": "Exists"}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-{i}",
            "generateName": "web-",
            "namespace": "prod",
            "uid": f"0b6e-{i:04d}",
            "resourceVersion": str(1000 + i),
            "generation": 1,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "abc"},
            "annotations": {
                "k8s.v1.cni.cncf.io/networks": "macvlan-conf@eth1",
                "k8s.v1.cni.cncf.io/network-status": '[{"name":"default","ips":["10.0.0.1"]}]',
            },
            "finalizers": ["example.com/f"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"}],
        },
        "spec": spec,
        "status": {"phase": "Running", "hostIP": "192.0.2.1", "podIP": "10.0.0.1"},
    }


# --- hand-made wire bytes --------------------------------------------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def ld(number: int, payload: bytes) -> bytes:
    return key(number, 2) + varint(len(payload)) + payload


def junk(base: int) -> bytes:
    """One unknown field of every wire type, groups nested, at field numbers from ``base``."""
    group_body = key(1, 0) + varint(7) + ld(2, b"x") + key(3, 3) + key(1, 5) + b"\0" * 4
    group_body += key(3, 4)
    return b"".join(
        [
            key(base, 0) + varint(2**63 + 5),
            key(base + 1, 1) + b"\x01" * 8,
            ld(base + 2, b"\x08\x96\x01 not even a message"),
            key(base + 3, 3) + group_body + key(base + 3, 4),
            key(base + 4, 5) + b"\x02" * 4,
            key(base + 5, 0) + varint(-1),
        ]
    )


def test_round_trip_of_a_realistic_pod_equals_trim_pod() -> None:
    pod = realistic_pod()
    assert kproto.decode_pod(protoencode.encode_pod(pod)) == trim_pod(pod)
    assert kproto.decode(protoencode.encode_pod(pod)) == trim_pod(pod)


def test_a_pod_without_node_or_annotations_trims_like_json() -> None:
    pod = realistic_pod(node=None)
    del pod["metadata"]["annotations"]
    decoded = kproto.decode_pod(protoencode.encode_pod(pod))
    assert decoded == trim_pod(pod)
    assert decoded["spec"] == {}
    assert "annotations" not in decoded["metadata"]


names = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
values = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)


@settings(max_examples=200, deadline=None)
@given(
    name=names,
    namespace=names,
    uid=names,
    rv=st.integers(min_value=0, max_value=2**63).map(str),
    node=st.one_of(st.none(), names),
    annotations=st.dictionaries(names, values, max_size=6),
)
def test_round_trip_of_any_pod(
    name: str, namespace: str, uid: str, rv: str, node: str | None, annotations: dict[str, str]
) -> None:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    meta = {k: v for k, v in meta.items() if v}  # JSON's omitempty: "" never appears
    meta["resourceVersion"] = rv
    if annotations:
        meta["annotations"] = annotations
    pod: dict[str, Any] = {"metadata": meta, "spec": {"nodeName": node} if node else {}}
    assert kproto.decode_pod(protoencode.encode_pod(pod)) == trim_pod(pod)


def test_pod_list_round_trip_with_list_meta() -> None:
    pods = [realistic_pod(i) for i in range(5)]
    body = protoencode.encode_pod_list(
        pods, resource_version="77", continue_token="tok", remaining_item_count=12
    )
    items, rv, token = kproto.decode_pod_list(body)
    assert items == [trim_pod(p) for p in pods]
    assert (rv, token) == ("77", "tok")
    decoded = kproto.decode(body)
    assert decoded["metadata"] == {
        "resourceVersion": "77",
        "continue": "tok",
        "remainingItemCount": 12,
    }
    assert decoded["items"] == items


def test_empty_pod_list() -> None:
    assert kproto.decode_pod_list(protoencode.encode_pod_list([], resource_version="3")) == (
        [],
        "3",
        "",
    )


def test_status_round_trip() -> None:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: 5 (9)",
        "reason": "Expired",
        "details": {"name": "p", "kind": "pods", "retryAfterSeconds": 3},
        "code": 410,
    }
    assert kproto.decode_status(protoencode.encode_status(status)) == status
    negative = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "code": -1}
    assert kproto.decode(protoencode.encode_status(negative)) == negative


def test_unknown_fields_of_every_wire_type_are_skipped_at_every_level() -> None:
    meta = (
        junk(100)
        + ld(1, b"p")
        + ld(2, b"")  # Go writes empty strings; JSON would omit them
        + ld(3, b"ns")
        + ld(4, b"")
        + ld(5, b"uid-1")
        + ld(6, b"42")
        + key(7, 0)
        + varint(3)
        + ld(8, key(1, 0) + varint(1714557600))
        + ld(11, ld(1, b"app") + ld(2, b"web"))
        + ld(12, ld(1, b"a") + junk(40) + ld(2, b"1"))
        + ld(12, ld(2, b"2") + ld(1, b"b"))  # map entries may come value first
        + ld(13, b"\x0a\x03abc")
        + junk(200)
    )
    spec = junk(100) + ld(2, ld(1, b"c") + junk(50)) + ld(10, b"node-9") + junk(300)
    pod = junk(10) + ld(1, meta) + ld(2, spec) + ld(3, ld(1, b"Running") + junk(90)) + junk(20)
    type_meta = ld(1, b"v1") + junk(10) + ld(2, b"Pod")
    body = protobuf.MAGIC + junk(20) + ld(1, type_meta) + ld(2, pod) + ld(3, b"") + ld(4, b"")
    expected = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "uid-1",
            "resourceVersion": "42",
            "annotations": {"a": "1", "b": "2"},
        },
        "spec": {"nodeName": "node-9"},
    }
    assert kproto.decode_pod(body) == expected
    # The same in a watch frame with unknown fields in the event and the raw extension.
    event = junk(30) + ld(1, b"MODIFIED") + ld(2, junk(5) + ld(1, body)) + junk(40)
    frame = struct.pack(">I", len(event)) + event
    assert list(kproto.iter_watch_frames([frame])) == [{"type": "MODIFIED", "object": expected}]


def test_later_occurrence_of_a_field_wins() -> None:
    pod = ld(1, ld(1, b"first") + ld(1, b"second")) + ld(2, ld(10, b"a")) + ld(2, ld(10, b"b"))
    body = protoencode.wrap("Pod", pod)
    decoded = kproto.decode_pod(body)
    assert decoded["metadata"]["name"] == "second"
    assert decoded["spec"] == {"nodeName": "b"}


def test_every_cut_inside_the_object_raises_value_error() -> None:
    message = protoencode.pod_message(realistic_pod())
    body = protoencode.encode_pod(realistic_pod())
    field2 = len(protobuf.MAGIC + ld(1, ld(1, b"v1") + ld(2, b"Pod")))
    raw_end = field2 + len(ld(2, message))
    assert body[field2:raw_end] == ld(2, message)
    accepted = []
    for cut in range(len(body)):
        try:
            kproto.decode_pod(body[:cut])
        except ValueError:
            continue
        accepted.append(cut)
    # A cut on a field boundary of the envelope is a shorter valid message (Go's decoder
    # accepts it too); a cut anywhere inside the Pod field never is.
    assert all(cut <= field2 or cut >= raw_end for cut in accepted), accepted
    assert field2 + 1 not in accepted and raw_end - 1 not in accepted


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"", "magic"),
        (b"{}", "magic"),
        (protobuf.MAGIC + key(1, 6), "wire type 6"),
        (protobuf.MAGIC + key(1, 7), "wire type 7"),
        (protobuf.MAGIC + b"\x00", "field number 0"),
        (protobuf.MAGIC + key(9, 0) + b"\xff" * 11, "varint too long"),
        (protobuf.MAGIC + key(9, 1) + b"\x00" * 7, "short fixed64"),
        (protobuf.MAGIC + key(9, 5) + b"\x00" * 3, "short fixed32"),
        (protobuf.MAGIC + key(9, 3) + key(1, 0) + varint(1), "unterminated group"),
        (protobuf.MAGIC + key(9, 3) + key(8, 4), "mismatched end group"),
        (protobuf.MAGIC + key(9, 4), "stray end group"),
        (protoencode.wrap("Pod", ld(1, ld(1, b"\xff\xfe"))), "invalid UTF-8"),
        (protoencode.wrap("Pod", b"", "v1") + b"\x1a\x04gzip", "content encoding"),
        (protoencode.encode_pod_list([]), "a PodList is not a Pod"),
    ],
)
def test_malformed_input_raises_value_error(body: bytes, why: str) -> None:
    with pytest.raises(ValueError):
        kproto.decode_pod(body)


def test_decode_refuses_kinds_outside_the_schema() -> None:
    with pytest.raises(ValueError):
        kproto.decode(protoencode.wrap("ConfigMap", b""))
    with pytest.raises(ValueError):
        protoencode.encode_object({"kind": "ConfigMap"})


def test_bookmark_and_error_events() -> None:
    bookmark = {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "99"}}
    error = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "code": 410}
    stream = protoencode.encode_watch_event("BOOKMARK", bookmark) + protoencode.encode_watch_event(
        "ERROR", protoencode.encode_status(error)
    )
    events = list(kproto.iter_watch_frames([stream]))
    assert events[0] == {
        "type": "BOOKMARK",
        "object": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"resourceVersion": "99"},
            "spec": {},
        },
    }
    assert events[1] == {"type": "ERROR", "object": error}


def test_truncated_stream_and_oversized_frames_raise() -> None:
    frame = protoencode.encode_watch_event("ADDED", realistic_pod())
    with pytest.raises(ValueError):
        list(kproto.iter_watch_frames([frame, frame[:-1]]))
    with pytest.raises(ValueError):
        list(kproto.iter_watch_frames([frame[:2]]))
    with pytest.raises(ValueError):
        kproto.WatchFrameReader().feed(struct.pack(">I", kproto.MAX_FRAME + 1))
    event_without_object = ld(1, b"ADDED")
    with pytest.raises(ValueError):
        kproto.WatchFrameReader().feed(struct.pack(">I", 7) + event_without_object)


EVENTS = [
    ("ADDED", realistic_pod(0)),
    ("MODIFIED", realistic_pod(1, node=None)),
    ("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}}),
    ("DELETED", realistic_pod(2)),
]
STREAM = b"".join(protoencode.encode_watch_event(t, o) for t, o in EVENTS)


@settings(max_examples=300, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_frames_split_at_arbitrary_chunk_boundaries(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(points)]
    events = list(kproto.iter_watch_frames(chunks))
    assert [e["type"] for e in events] == [t for t, _ in EVENTS]
    assert [e["object"] for e in events] == [trim_pod(o) for _, o in EVENTS]


def test_encoded_timestamps_and_envelope_follow_the_upstream_layout() -> None:
    body = protoencode.encode_pod(realistic_pod())
    assert body.startswith(protobuf.MAGIC + b"\x0a\x09\x0a\x02v1\x12\x03Pod\x12")
    assert body.endswith(b"\x1a\x00\x22\x00")
    # creationTimestamp 2024-05-01T10:00:00Z as meta.Time{seconds}: field 8 of ObjectMeta.
    assert ld(8, key(1, 0) + varint(1714557600)) in body


def test_a_pod_serialised_by_the_official_runtime_decodes_to_its_trim() -> None:
    body = official_pod_bytes()
    assert kproto.decode_pod(body) == OFFICIAL_POD_TRIMMED
    event = protoencode.encode_watch_event("ADDED", body)
    assert list(kproto.iter_watch_frames([event])) == [
        {"type": "ADDED", "object": OFFICIAL_POD_TRIMMED}
    ]


def test_map_entries_with_long_values_and_broken_entries() -> None:
    long_value = "v" * 20_000  # a three-byte length: off the fast path
    pod = {"metadata": {"annotations": {"a": "x" * 200, "b": long_value}}}
    assert kproto.decode_pod(protoencode.encode_pod(pod))["metadata"]["annotations"] == {
        "a": "x" * 200,
        "b": long_value,
    }
    for entry in (b"\x0a\x01a\x12\x80", b"\x0a\x01a\x12\x85", b"\x0a\x05a", b"\x0a\x01a\x12"):
        with pytest.raises(ValueError):
            kproto.decode_pod(protoencode.wrap("Pod", ld(1, ld(12, entry))))
