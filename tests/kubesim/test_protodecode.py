"""The emulator's protobuf reader: request bodies as kubectl (Go) writes them, round trips
through the same tables the encoder uses, unknown fields, and the API server's 400 wording."""

from __future__ import annotations

from typing import Any

import pytest

from multusd import protobuf
from multusd.kubesim import kindproto, podproto, protodecode, protoencode
from multusd.kubesim.errors import ApiError
from multusd.kubesim.protoencode import put_bytes, put_int, put_str

# Request bodies kubectl 1.33.1 sent to the emulator (captured from its request handler):
# `kubectl create namespace x`, the pod of `kubectl debug p1 --copy-to=p2 --image=busybox
# --attach=false --replace --profile=general`, and the DeleteOptions of its --replace.
KUBECTL_NAMESPACE = bytes.fromhex(
    "6b3873000a0f0a02763112094e616d65737061636512190a110a017812001a0022002a003200380042001200"
    "1a020a001a002200"
)
KUBECTL_POD = bytes.fromhex(
    "6b3873000a090a0276311203506f6412e2010a190a02703212001a0764656661756c7422002a003200380042"
    "0012af01121b0a0270311201782a0042006a007200800100880100900100a2010012410a0e64656275676765"
    "722d35717a7332120762757379626f782a0042006a0072007a0e0a0c0a0a5359535f50545241434580010088"
    "0100900100a2010446696c651a054e65766572201e320c436c75737465724669727374420764656661756c74"
    "4a00520058006000680072008201008a01009a011164656661756c742d7363686564756c6572c20100d80101"
    "f001011a130a001a0022002a0032004a005a0072008801001a002200"
)
KUBECTL_DELETE_OPTIONS = bytes.fromhex(
    "6b3873000a130a027631120d44656c6574654f7074696f6e73120208001a002200"
)


def test_kubectl_create_namespace_body() -> None:
    # Go writes every non-pointer field (empty strings, generation 0, a zero creationTimestamp
    # as an empty message); JSON would carry none of them.
    assert protodecode.decode_object(KUBECTL_NAMESPACE, "v1", "Namespace") == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "x"},
        "spec": {},
        "status": {},
    }


def test_kubectl_debug_pod_body_is_what_its_json_would_be() -> None:
    pod = protodecode.decode_object(KUBECTL_POD, "v1", "Pod")
    assert pod["metadata"] == {"name": "p2", "namespace": "default"}
    spec = pod["spec"]
    assert [c["name"] for c in spec["containers"]] == ["p1", "debugger-5qzs2"]
    debugger = spec["containers"][1]
    assert debugger == {
        "name": "debugger-5qzs2",
        "image": "busybox",
        "resources": {},
        "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}},
        "terminationMessagePolicy": "File",
    }
    # Pointer fields keep their values; non-pointer omitempty zeros (stdin, hostNetwork) go.
    assert spec["enableServiceLinks"] is True
    assert spec["terminationGracePeriodSeconds"] == 30
    assert "hostNetwork" not in spec and "stdin" not in debugger
    assert pod["status"] == {}


def test_kubectl_delete_options_body() -> None:
    assert protodecode.decode_delete_options(KUBECTL_DELETE_OPTIONS) == {"gracePeriodSeconds": 0}


def _round_trip(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    table = kindproto.MESSAGES[(api_version, kind)]
    body = protoencode.wrap(kind, podproto.message(obj, table), api_version)
    decoded = protodecode.decode_object(body, api_version, kind)
    assert decoded.pop("apiVersion") == api_version and decoded.pop("kind") == kind
    return decoded


NAMESPACE = {
    "metadata": {
        "name": "demo", "uid": "u", "resourceVersion": "12",
        "creationTimestamp": "2024-05-01T10:00:00Z",
        "labels": {"kubernetes.io/metadata.name": "demo"},
        "annotations": {"a": "b"}, "finalizers": ["x/y"],
    },
    "spec": {"finalizers": ["kubernetes"]},
    "status": {"phase": "Terminating", "conditions": [{
        "type": "NamespaceDeletionDiscoveryFailure", "status": "False",
        "lastTransitionTime": "2024-05-01T10:00:01Z", "reason": "R", "message": "m",
    }]},
}  # fmt: skip
REFERENCE = {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "u1", "apiVersion": "v1"}
EVENT = {
    "metadata": {"name": "p.17", "namespace": "ns", "uid": "e1", "resourceVersion": "9"},
    "involvedObject": dict(REFERENCE, resourceVersion="8", fieldPath="spec.containers{c}"),
    "reason": "AddedInterface", "message": "Add eth0 [10.0.0.5/24] from cbr0",
    "source": {"component": "multus", "host": "node1"},
    "firstTimestamp": "2024-05-01T10:00:00Z", "lastTimestamp": "2024-05-01T10:00:05Z",
    "count": 3, "type": "Normal", "eventTime": "2024-05-01T10:00:00.123456Z",
    "series": {"count": 2, "lastObservedTime": "2024-05-01T10:00:04.500000Z"},
    "action": "Add", "related": REFERENCE,
    "reportingComponent": "multus", "reportingInstance": "node1",
}  # fmt: skip
EVENT_V1 = {
    "metadata": {"name": "p.18", "namespace": "ns"},
    "eventTime": "2024-05-01T10:00:00.000001Z",
    "series": {"count": 0, "lastObservedTime": "2024-05-01T10:00:00.000002Z"},
    "reportingController": "multus", "reportingInstance": "node1", "action": "Add",
    "reason": "AddedInterface", "regarding": REFERENCE, "related": REFERENCE, "note": "n",
    "type": "Normal", "deprecatedSource": {"component": "multus"},
    "deprecatedFirstTimestamp": "2024-05-01T10:00:00Z",
    "deprecatedLastTimestamp": "2024-05-01T10:00:00Z", "deprecatedCount": 1,
}  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "api_version", "kind"),
    [
        (NAMESPACE, "v1", "Namespace"),
        (EVENT, "v1", "Event"),
        (EVENT_V1, "events.k8s.io/v1", "Event"),
    ],
    ids=["namespace", "event", "events.k8s.io-event"],
)
def test_every_table_field_round_trips(obj: dict[str, Any], api_version: str, kind: str) -> None:
    assert _round_trip(obj, api_version, kind) == obj


def test_zero_values_follow_go_json() -> None:
    """INT/BOOL (pointers, required fields) keep a zero; INT0/BOOL0 (non-pointer omitempty)
    and empty strings read as unset, as Go's JSON for the decoded struct would leave them."""
    container = bytearray()
    put_str(container, 1, "c")
    put_bytes(container, 5, b"")  # workingDir ""
    put_int(container, 16, 0)  # stdin false (BOOL0)
    spec = bytearray()
    put_bytes(spec, 2, bytes(container))
    put_int(spec, 11, 0)  # hostNetwork false (BOOL0)
    put_int(spec, 21, 0)  # automountServiceAccountToken false (BOOL, a pointer)
    put_int(spec, 25, 0)  # priority 0 (INT, a pointer)
    status = bytearray()
    cstatus = bytearray()
    put_str(cstatus, 1, "c")
    put_int(cstatus, 4, 0)  # ready false (BOOL, required)
    put_int(cstatus, 5, 0)  # restartCount 0 (INT, required)
    put_bytes(status, 8, bytes(cstatus))
    put_bytes(status, 7, b"")  # startTime: Go's zero time
    meta = bytearray()
    put_str(meta, 1, "p")
    put_int(meta, 7, 0)  # generation 0 (INT0)
    pod = bytearray()
    put_bytes(pod, 1, bytes(meta))
    put_bytes(pod, 2, bytes(spec))
    put_bytes(pod, 3, bytes(status))
    decoded = protodecode.decode_object(protoencode.wrap("Pod", bytes(pod)), "v1", "Pod")
    assert decoded == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c"}],
            "automountServiceAccountToken": False,
            "priority": 0,
        },
        "status": {"containerStatuses": [{"name": "c", "ready": False, "restartCount": 0}]},
    }


def test_unknown_fields_are_skipped_and_times_read_as_go_does() -> None:
    meta = bytearray()
    put_str(meta, 1, "p")
    stamp = bytearray()
    put_int(stamp, 1, 1714557600)
    put_int(stamp, 2, 999_999_999)  # metav1.Time keeps whole seconds only
    put_bytes(meta, 8, bytes(stamp))
    put_bytes(meta, 17, b"\x0a\x01m")  # managedFields: not in the tables
    put_int(meta, 99, 7)  # a field from the future
    put_str(meta, 100, "x")
    pod = bytearray()
    put_bytes(pod, 1, bytes(meta))
    body = protoencode.wrap("Pod", bytes(pod))
    assert protodecode.decode_object(body, "v1", "Pod")["metadata"] == {
        "name": "p",
        "creationTimestamp": "2024-05-01T10:00:00Z",
    }


def test_envelope_defaults_and_kind_from_the_body() -> None:
    # An envelope without typeMeta takes the resource's kind, as Go's copyKindDefaults does.
    bare = bytearray(protobuf.MAGIC)
    put_bytes(bare, 2, podproto.message({"metadata": {"name": "n"}}, kindproto.NAMESPACE))
    assert protodecode.decode_object(bytes(bare), "v1", "Namespace") == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "n"},
    }
    # A body of another known kind is read as that kind (the create then refuses the kind).
    pod = protodecode.decode_object(
        protoencode.encode_pod({"metadata": {"name": "p"}}), "v1", "Event"
    )
    assert pod["kind"] == "Pod"


def _message(body: bytes, api_version: str = "v1", kind: str = "Pod") -> str:
    with pytest.raises(ApiError) as err:
        protodecode.decode_object(body, api_version, kind)
    assert (err.value.code, err.value.reason) == (400, "BadRequest")
    return err.value.message


def test_undecodable_bodies_get_the_api_servers_400() -> None:
    assert _message(b"") == (
        "the object provided is unrecognized (must be of type Pod): empty data (<empty>)"
    )
    assert _message(b'{"kind":"Pod"}') == (
        "the object provided is unrecognized (must be of type Pod): provided data does not "
        'appear to be a protobuf message, expected prefix [107 56 115 0] ({"kind":"Pod"})'
    )
    whole = protoencode.encode_pod({"metadata": {"name": "p", "namespace": "default"}})
    assert _message(whole[:-3]) == (
        "the object provided is unrecognized (must be of type Pod): unexpected EOF "
        f"({whole[:30].hex()} ...)"
    )
    # The envelope is fine, the Pod inside is not.
    assert _message(protoencode.wrap("Pod", b"\x0a\x05\x0a\x03ab")) == (
        'Pod in version "v1" cannot be handled as a Pod: unexpected EOF'
    )
    assert _message(protoencode.wrap("Pod", b"\x08\x01")) == (
        'Pod in version "v1" cannot be handled as a Pod: proto: wrong wireType = 0 for field '
        "metadata"
    )
    assert _message(protoencode.wrap("ConfigMap", b""), kind="Namespace") == (
        'ConfigMap in version "v1" cannot be handled as a Namespace: no kind "ConfigMap" is '
        'registered for version "v1"'
    )


def test_undecodable_delete_options() -> None:
    with pytest.raises(ApiError) as err:
        protodecode.decode_delete_options(KUBECTL_DELETE_OPTIONS[:-5])
    assert (err.value.code, err.value.message) == (400, "unexpected EOF")
    with pytest.raises(ApiError) as err:
        protodecode.decode_delete_options(protoencode.encode_pod({}))
    assert err.value.message == "decoded object cannot be converted to DeleteOptions"
