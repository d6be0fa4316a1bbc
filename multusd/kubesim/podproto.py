"""Pods in Kubernetes protobuf as a real API server sends them: every field, not just ours.

``multusd.kubesim.protoencode.pod_message`` writes only the fields the daemon reads. That is
enough for correctness tests, but an emulator that sent only those would flatter the daemon in
every protobuf benchmark (760 bytes a pod instead of ~2,800, and nothing for the decoder to
skip). So the emulator encodes its stored JSON pods with this table of ``core/v1`` messages: the
fields pods commonly carry (containers with env, ports, resources, probes and mounts; volumes;
tolerations; status with conditions and container states), numbered as in ``k8s.io/api`` and
``k8s.io/apimachinery`` ``generated.proto``. JSON keys outside the table are dropped, as a
typed decode would drop unknown ones. Checked against a pod serialised by the official protobuf
runtime (``tests/kproto_fixtures.py``).

Go's ``json:",inline"`` members (``Volume.volumeSource``, ``Probe.handler``,
``LocalObjectReference`` in config-map and secret references) take their keys from the
enclosing JSON object; the table marks them ``INLINE``.

The same tables read protobuf request bodies (``multusd.kubesim.protodecode``; the other
built-in kinds are in ``multusd.kubesim.kindproto``), so one description of each message serves
both directions. Reading needs one fact writing does not: Go writes every non-pointer field on
the wire, zero or not, and its JSON leaves the ``omitempty`` ones out when zero. ``INT0`` and
``BOOL0`` mark those (non-pointer, ``omitempty``: a zero on the wire means unset); ``INT`` and
``BOOL`` are pointers or required fields, whose zero is a value (``automountServiceAccountToken:
false``). Each kind was checked against the Go struct tags in ``k8s.io/api`` ``core/v1/types.go``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from multusd.kubesim.protoencode import put_bytes, put_int, put_str, time_message

# Field kinds: how a JSON value becomes wire bytes (and back). INT0/BOOL0: a zero is unset
# (Go's non-pointer omitempty fields); MICROTIME: metav1.MicroTime (microseconds kept).
STR, INT, BOOL, MSG, STRS, MSGS, MAP, QMAP, TIME, INTSTR, INLINE, INT0, BOOL0, MICROTIME = range(14)
BYTES = 14  # a Go []byte: raw on the wire, base64 in JSON (a CSR's request and certificate)
VARINT_KINDS = frozenset((INT, BOOL, INT0, BOOL0))

Table = dict[str, tuple[int, int, Any]]  # JSON key -> (field number, kind, message table)

_LOCAL_REF: Table = {"name": (1, STR, None)}
_FIELD_REF: Table = {"apiVersion": (1, STR, None), "fieldPath": (2, STR, None)}
_RESOURCE_REF: Table = {"containerName": (1, STR, None), "resource": (2, STR, None)}
_KEY_TO_PATH: Table = {"key": (1, STR, None), "path": (2, STR, None), "mode": (3, INT, None)}
_KEY_REF: Table = {
    "": (1, INLINE, _LOCAL_REF),
    "key": (2, STR, None),
    "optional": (3, BOOL, None),
}
_OWNER: Table = {
    "kind": (1, STR, None),
    "name": (3, STR, None),
    "uid": (4, STR, None),
    "apiVersion": (5, STR, None),
    "controller": (6, BOOL, None),
    "blockOwnerDeletion": (7, BOOL, None),
}
OBJECT_META: Table = {
    "name": (1, STR, None),
    "generateName": (2, STR, None),
    "namespace": (3, STR, None),
    "selfLink": (4, STR, None),
    "uid": (5, STR, None),
    "resourceVersion": (6, STR, None),
    "generation": (7, INT0, None),
    "creationTimestamp": (8, TIME, None),
    "deletionTimestamp": (9, TIME, None),
    "deletionGracePeriodSeconds": (10, INT, None),
    "labels": (11, MAP, None),
    "annotations": (12, MAP, None),
    "ownerReferences": (13, MSGS, _OWNER),
    "finalizers": (14, STRS, None),
}
_HTTP_GET: Table = {
    "path": (1, STR, None),
    "port": (2, INTSTR, None),
    "host": (3, STR, None),
    "scheme": (4, STR, None),
    "httpHeaders": (5, MSGS, {"name": (1, STR, None), "value": (2, STR, None)}),
}
_PROBE_HANDLER: Table = {
    "exec": (1, MSG, {"command": (1, STRS, None)}),
    "httpGet": (2, MSG, _HTTP_GET),
    "tcpSocket": (3, MSG, {"port": (1, INTSTR, None), "host": (2, STR, None)}),
    "grpc": (4, MSG, {"port": (1, INT, None), "service": (2, STR, None)}),
}
_PROBE: Table = {
    "": (1, INLINE, _PROBE_HANDLER),
    "initialDelaySeconds": (2, INT0, None),
    "timeoutSeconds": (3, INT0, None),
    "periodSeconds": (4, INT0, None),
    "successThreshold": (5, INT0, None),
    "failureThreshold": (6, INT0, None),
    "terminationGracePeriodSeconds": (7, INT, None),
}
_ENV_SOURCE: Table = {
    "fieldRef": (1, MSG, _FIELD_REF),
    "resourceFieldRef": (2, MSG, _RESOURCE_REF),
    "configMapKeyRef": (3, MSG, _KEY_REF),
    "secretKeyRef": (4, MSG, _KEY_REF),
}
_SECURITY_CONTEXT: Table = {
    "capabilities": (1, MSG, {"add": (1, STRS, None), "drop": (2, STRS, None)}),
    "privileged": (2, BOOL, None),
    "runAsUser": (4, INT, None),
    "runAsNonRoot": (5, BOOL, None),
    "readOnlyRootFilesystem": (6, BOOL, None),
    "allowPrivilegeEscalation": (7, BOOL, None),
    "runAsGroup": (8, INT, None),
}
_CONTAINER: Table = {
    "name": (1, STR, None),
    "image": (2, STR, None),
    "command": (3, STRS, None),
    "args": (4, STRS, None),
    "workingDir": (5, STR, None),
    "ports": (6, MSGS, {
        "name": (1, STR, None), "hostPort": (2, INT0, None), "containerPort": (3, INT, None),
        "protocol": (4, STR, None), "hostIP": (5, STR, None),
    }),
    "env": (7, MSGS, {
        "name": (1, STR, None), "value": (2, STR, None), "valueFrom": (3, MSG, _ENV_SOURCE),
    }),
    "resources": (8, MSG, {"limits": (1, QMAP, None), "requests": (2, QMAP, None)}),
    "volumeMounts": (9, MSGS, {
        "name": (1, STR, None), "readOnly": (2, BOOL0, None), "mountPath": (3, STR, None),
        "subPath": (4, STR, None), "mountPropagation": (5, STR, None),
    }),
    "livenessProbe": (10, MSG, _PROBE),
    "readinessProbe": (11, MSG, _PROBE),
    "terminationMessagePath": (13, STR, None),
    "imagePullPolicy": (14, STR, None),
    "securityContext": (15, MSG, _SECURITY_CONTEXT),
    "stdin": (16, BOOL0, None),
    "tty": (18, BOOL0, None),
    "terminationMessagePolicy": (20, STR, None),
    "startupProbe": (22, MSG, _PROBE),
}  # fmt: skip
_VOLUME_PROJECTION: Table = {
    "secret": (1, MSG, {"": (1, INLINE, _LOCAL_REF), "items": (2, MSGS, _KEY_TO_PATH)}),
    "downwardAPI": (2, MSG, {"items": (1, MSGS, {
        "path": (1, STR, None), "fieldRef": (2, MSG, _FIELD_REF),
        "resourceFieldRef": (3, MSG, _RESOURCE_REF), "mode": (4, INT, None),
    })}),
    "configMap": (3, MSG, {"": (1, INLINE, _LOCAL_REF), "items": (2, MSGS, _KEY_TO_PATH)}),
    "serviceAccountToken": (4, MSG, {
        "audience": (1, STR, None), "expirationSeconds": (2, INT, None), "path": (3, STR, None),
    }),
}  # fmt: skip
_VOLUME_SOURCE: Table = {
    "hostPath": (1, MSG, {"path": (1, STR, None), "type": (2, STR, None)}),
    "emptyDir": (2, MSG, {"medium": (1, STR, None)}),
    "secret": (6, MSG, {
        "secretName": (1, STR, None), "items": (2, MSGS, _KEY_TO_PATH),
        "defaultMode": (3, INT, None), "optional": (4, BOOL, None),
    }),
    "persistentVolumeClaim": (10, MSG, {"claimName": (1, STR, None), "readOnly": (2, BOOL0, None)}),
    "configMap": (19, MSG, {
        "": (1, INLINE, _LOCAL_REF), "items": (2, MSGS, _KEY_TO_PATH),
        "defaultMode": (3, INT, None), "optional": (4, BOOL, None),
    }),
    "projected": (26, MSG, {
        "sources": (1, MSGS, _VOLUME_PROJECTION), "defaultMode": (2, INT, None),
    }),
}  # fmt: skip
_TOLERATION: Table = {
    "key": (1, STR, None),
    "operator": (2, STR, None),
    "value": (3, STR, None),
    "effect": (4, STR, None),
    "tolerationSeconds": (5, INT, None),
}
POD_SPEC: Table = {
    "volumes": (1, MSGS, {"name": (1, STR, None), "": (2, INLINE, _VOLUME_SOURCE)}),
    "containers": (2, MSGS, _CONTAINER),
    "restartPolicy": (3, STR, None),
    "terminationGracePeriodSeconds": (4, INT, None),
    "activeDeadlineSeconds": (5, INT, None),
    "dnsPolicy": (6, STR, None),
    "nodeSelector": (7, MAP, None),
    "serviceAccountName": (8, STR, None),
    "serviceAccount": (9, STR, None),
    "nodeName": (10, STR, None),
    "hostNetwork": (11, BOOL0, None),
    "hostPID": (12, BOOL0, None),
    "hostIPC": (13, BOOL0, None),
    "securityContext": (14, MSG, {"runAsUser": (2, INT, None), "runAsNonRoot": (3, BOOL, None),
                                  "fsGroup": (5, INT, None), "runAsGroup": (6, INT, None)}),
    "imagePullSecrets": (15, MSGS, _LOCAL_REF),
    "hostname": (16, STR, None),
    "subdomain": (17, STR, None),
    "schedulerName": (19, STR, None),
    "initContainers": (20, MSGS, _CONTAINER),
    "automountServiceAccountToken": (21, BOOL, None),
    "tolerations": (22, MSGS, _TOLERATION),
    "priorityClassName": (24, STR, None),
    "priority": (25, INT, None),
    "enableServiceLinks": (30, BOOL, None),
    "preemptionPolicy": (31, STR, None),
}  # fmt: skip
_CONTAINER_STATE: Table = {
    "waiting": (1, MSG, {"reason": (1, STR, None), "message": (2, STR, None)}),
    "running": (2, MSG, {"startedAt": (1, TIME, None)}),
    "terminated": (3, MSG, {
        "exitCode": (1, INT, None), "signal": (2, INT0, None), "reason": (3, STR, None),
        "message": (4, STR, None), "startedAt": (5, TIME, None), "finishedAt": (6, TIME, None),
        "containerID": (7, STR, None),
    }),
}  # fmt: skip
_CONTAINER_STATUS: Table = {
    "name": (1, STR, None),
    "state": (2, MSG, _CONTAINER_STATE),
    "lastState": (3, MSG, _CONTAINER_STATE),
    "ready": (4, BOOL, None),
    "restartCount": (5, INT, None),
    "image": (6, STR, None),
    "imageID": (7, STR, None),
    "containerID": (8, STR, None),
    "started": (9, BOOL, None),
}
POD_STATUS: Table = {
    "phase": (1, STR, None),
    "conditions": (2, MSGS, {
        "type": (1, STR, None), "status": (2, STR, None), "lastProbeTime": (3, TIME, None),
        "lastTransitionTime": (4, TIME, None), "reason": (5, STR, None),
        "message": (6, STR, None),
    }),
    "message": (3, STR, None),
    "reason": (4, STR, None),
    "hostIP": (5, STR, None),
    "podIP": (6, STR, None),
    "startTime": (7, TIME, None),
    "containerStatuses": (8, MSGS, _CONTAINER_STATUS),
    "qosClass": (9, STR, None),
    "initContainerStatuses": (10, MSGS, _CONTAINER_STATUS),
    "nominatedNodeName": (11, STR, None),
    "podIPs": (12, MSGS, {"ip": (1, STR, None)}),
    "hostIPs": (16, MSGS, {"ip": (1, STR, None)}),
    # DRA (multusd.k8s.dra reads them): PodResourceClaimStatus, PodExtendedResourceClaimStatus.
    "resourceClaimStatuses": (15, MSGS, {"name": (1, STR, None),
                                         "resourceClaimName": (2, STR, None)}),
    "extendedResourceClaimStatus": (18, MSG, {
        "requestMappings": (1, MSGS, {"containerName": (1, STR, None),
                                      "resourceName": (2, STR, None),
                                      "requestName": (3, STR, None)}),
        "resourceClaimName": (2, STR, None),
    }),
}  # fmt: skip
POD: Table = {
    "metadata": (1, MSG, OBJECT_META),
    "spec": (2, MSG, POD_SPEC),
    "status": (3, MSG, POD_STATUS),
}


def in_field_order(table: Table, done: set[int] | None = None) -> Table:
    """Reorder ``table`` and every table under it by field number, in place (shared sub-tables
    once), so that encoding writes fields in Go's order without sorting per message."""
    done = set() if done is None else done
    if id(table) in done:
        return table
    done.add(id(table))
    ordered = sorted(table.items(), key=lambda item: item[1][0])
    table.clear()
    table.update(ordered)
    for *_, sub in table.values():
        if sub is not None:
            in_field_order(sub, done)
    return table


in_field_order(POD)


def pod_message(obj: Mapping[str, Any]) -> bytes:
    """A bare ``core.v1.Pod`` message of a JSON pod, every field of the table included."""
    return message(obj, POD)


def message(obj: Mapping[str, Any], table: Table) -> bytes:
    """The message ``table`` describes, from the JSON object ``obj``, in field-number order
    (as Go writes it; the tables are kept in that order)."""
    out = bytearray()
    for key, (number, kind, sub) in table.items():
        if kind == INLINE:
            put_bytes(out, number, message(obj, sub))
        elif key in obj:
            _field(out, number, kind, sub, obj[key])
    return bytes(out)


def _field(out: bytearray, number: int, kind: int, sub: Any, value: Any) -> None:
    if kind == STR:
        put_str(out, number, value)
    elif kind in (INT, INT0):
        put_int(out, number, value)
    elif kind in (BOOL, BOOL0):
        if isinstance(value, bool):
            put_int(out, number, int(value))
    elif kind == MSG:
        if isinstance(value, Mapping):
            put_bytes(out, number, message(value, sub))
    elif kind == MSGS:
        for item in value if isinstance(value, list) else ():
            if isinstance(item, Mapping):
                put_bytes(out, number, message(item, sub))
    elif kind == STRS:
        for item in value if isinstance(value, list) else ():
            put_str(out, number, item)
    elif kind in (MAP, QMAP):
        for key, val in value.items() if isinstance(value, Mapping) else ():
            entry = bytearray()
            put_str(entry, 1, str(key))
            if kind == MAP:
                put_str(entry, 2, str(val))
            else:  # resource.Quantity { string string = 1; }
                quantity = bytearray()
                put_str(quantity, 1, str(val))
                put_bytes(entry, 2, bytes(quantity))
            put_bytes(out, number, bytes(entry))
    elif kind == BYTES:
        if isinstance(value, str):
            put_bytes(out, number, base64.b64decode(value))
    elif kind in (TIME, MICROTIME):
        stamp = time_message(value)
        if stamp is not None:
            put_bytes(out, number, stamp)
    elif (
        kind == INTSTR
    ):  # intstr.IntOrString { int64 type = 1; int32 intVal = 2; string strVal = 3; }
        choice = bytearray()
        if isinstance(value, str):
            put_int(choice, 1, 1)
            put_str(choice, 3, value)
        else:
            put_int(choice, 1, 0)
            put_int(choice, 2, value)
        put_bytes(out, number, bytes(choice))
