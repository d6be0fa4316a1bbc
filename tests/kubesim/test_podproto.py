"""The emulator's complete protobuf pods: field numbers checked against a pod serialised by the
official protobuf runtime from upstream's ``generated.proto``, the daemon's decoder reading
them to exactly the trimmed pod, and the emulator's own reader (the same table) taking them
back to the JSON pod."""

from __future__ import annotations

import json
from typing import Any

from multusd import protobuf
from multusd.k8s import kproto
from multusd.k8s.store import trim_pod
from multusd.kubesim import podproto, protodecode, protoencode
from tests.kproto_fixtures import OFFICIAL_POD_TRIMMED, official_pod_bytes

STAMP = "2024-05-01T10:00:00Z"
POD_IP_REF = {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}
NAMESPACE_REF = {"apiVersion": "v1", "fieldPath": "metadata.namespace"}
CA_ITEMS = [{"key": "ca.crt", "path": "ca.crt"}]
PROBE = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10}
CONTAINER = {
    "name": "app",
    "image": "registry.example.com/team/app:1.4.2",
    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
    "env": [
        {"name": "VAR_0", "value": "value-0"},
        {"name": "POD_IP", "valueFrom": POD_IP_REF},
    ],
    "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "128Mi"}},
    "volumeMounts": [{"name": "kube-api-access", "readOnly": True, "mountPath": "/var/run/x"}],
    "livenessProbe": PROBE,
    "readinessProbe": dict(PROBE, httpGet={"path": "/ready", "port": "http"}),
    "terminationMessagePath": "/dev/termination-log",
    "imagePullPolicy": "IfNotPresent",
    "terminationMessagePolicy": "File",
}  # fmt: skip
POD: dict[str, Any] = {
    "metadata": {
        "name": "web-7", "generateName": "web-", "namespace": "ns-7", "uid": "u-7",
        "resourceVersion": "7", "creationTimestamp": STAMP,
        "labels": {"app": "web"},
        "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan-conf"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                             "uid": "aa", "controller": True, "blockOwnerDeletion": True}],
    },
    "spec": {
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": CA_ITEMS}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": NAMESPACE_REF}]}},
        ]}}],
        "containers": [CONTAINER, dict(CONTAINER, name="sidecar")],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default",
        "nodeName": "node-7", "schedulerName": "default-scheduler",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                         "effect": "NoExecute", "tolerationSeconds": 300}],
        "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
    },
    "status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": STAMP}],
        "hostIP": "192.0.2.10", "podIP": "10.244.1.5", "startTime": STAMP,
        "containerStatuses": [{
            "name": "app", "state": {"running": {"startedAt": STAMP}}, "ready": True,
            "restartCount": 0, "image": "i", "imageID": "i@sha256:0", "containerID": "c://0",
            "started": True,
        }],
        "qosClass": "Burstable",
        "podIPs": [{"ip": "10.244.1.5"}], "hostIPs": [{"ip": "192.0.2.10"}],
    },
}  # fmt: skip

Path = tuple[int, ...]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _paths(buf: bytes, table: podproto.Table, prefix: Path = ()) -> set[Path]:
    """Every field path in ``buf``, descending where ``table`` says a field is a message."""
    by_number = {number: (kind, sub) for number, kind, sub in table.values()}
    found: set[Path] = set()
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        path = (*prefix, number)
        found.add(path)
        if wire == 0:
            _, pos = _varint(buf, pos)
            continue
        assert wire == 2, (path, wire)
        length, pos = _varint(buf, pos)
        kind, sub = by_number.get(number, (None, None))
        if kind in (podproto.MSG, podproto.MSGS, podproto.INLINE):
            found |= _paths(buf[pos : pos + length], sub, path)
        pos += length
    return found


def test_every_field_we_write_is_where_the_official_runtime_puts_it() -> None:
    _, _, official = protobuf.unwrap(official_pod_bytes())
    ours = podproto.pod_message(POD)
    missing = _paths(ours, podproto.POD) - _paths(official, podproto.POD)
    assert not missing, sorted(missing)


def test_the_daemon_decodes_a_complete_pod_to_its_trim() -> None:
    body = protoencode.wrap("Pod", podproto.pod_message(POD))
    assert kproto.decode_pod(body) == trim_pod(POD)
    assert len(body) > 3 * len(protoencode.encode_pod(POD))  # the trimmed form hides most bytes
    assert len(body) < len(json.dumps(POD, separators=(",", ":")))


def test_unknown_keys_are_dropped_and_inline_members_always_written() -> None:
    pod = {"spec": {"volumes": [{"name": "v"}], "bogus": 1}, "status": {"phase": "Pending"}}
    message = podproto.pod_message(pod)
    assert _paths(message, podproto.POD) == {
        (2,),
        (2, 1),
        (2, 1, 1),
        (2, 1, 2),  # the volume, its name and its (empty) source
        (3,),
        (3, 1),
    }


def _empty_fields(buf: bytes, table: podproto.Table, prefix: Path = ()) -> set[Path]:
    """Paths of the length-delimited fields in ``buf`` whose payload is empty (Go's zero
    strings and zero Times), descending like ``_paths``."""
    by_number = {number: (kind, sub) for number, kind, sub in table.values()}
    found: set[Path] = set()
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
            continue
        length, pos = _varint(buf, pos)
        kind, sub = by_number.get(number, (None, None))
        if length == 0:
            found.add((*prefix, number))
        elif kind in (podproto.MSG, podproto.MSGS, podproto.INLINE):
            found |= _empty_fields(buf[pos : pos + length], sub, (*prefix, number))
        pos += length
    return found


def test_a_complete_pod_round_trips_through_the_one_table() -> None:
    body = protoencode.wrap("Pod", podproto.pod_message(POD))
    assert protodecode.decode_object(body, "v1", "Pod") == {
        "apiVersion": "v1",
        "kind": "Pod",
        **POD,
    }


def test_the_official_runtimes_pod_decodes_and_encodes_back() -> None:
    """The official runtime's bytes read to the trimmed pod the daemon sees; written back
    from the decoded dict they are the same message, less the empty fields (a zero selfLink,
    a zero lastProbeTime) that JSON leaves out and so the encoder never writes."""
    official = official_pod_bytes()
    decoded = protodecode.decode_object(official, "v1", "Pod")
    assert trim_pod(decoded) == OFFICIAL_POD_TRIMMED
    assert len(decoded["spec"]["containers"]) == 2
    _, _, raw = protobuf.unwrap(official)
    again = podproto.pod_message(decoded)
    lost = _paths(raw, podproto.POD) - _paths(again, podproto.POD)
    assert lost and lost <= _empty_fields(raw, podproto.POD)
    assert protodecode.decode_object(protoencode.wrap("Pod", again), "v1", "Pod") == decoded
