"""The protobuf messages of the other built-in kinds the emulator stores, and the one table of
each message by kind: Namespace, Event (``core/v1`` and ``events.k8s.io/v1``), DeleteOptions.

Same table format and kinds as the Pod's (``multusd.kubesim.podproto``), used both ways: the
emulator answers these kinds in protobuf when asked, and reads them from protobuf request bodies
(kubectl's typed commands, ``kubectl create namespace`` for one, send nothing else). Field
numbers and kinds are from ``k8s.io/api`` ``core/v1`` and ``events/v1`` and ``k8s.io/apimachinery``
``meta/v1`` (``generated.proto`` and the Go struct tags it is generated from). Custom resources
(NADs) have no protobuf form on a real API server either, so they are not here.
"""

from __future__ import annotations

from multusd.kubesim.certproto import CERTIFICATE_SIGNING_REQUEST
from multusd.kubesim.podproto import (
    BOOL,
    INT,
    INT0,
    MICROTIME,
    MSG,
    MSGS,
    OBJECT_META,
    POD,
    STR,
    STRS,
    TIME,
    Table,
    in_field_order,
)

OBJECT_REFERENCE: Table = {
    "kind": (1, STR, None),
    "namespace": (2, STR, None),
    "name": (3, STR, None),
    "uid": (4, STR, None),
    "apiVersion": (5, STR, None),
    "resourceVersion": (6, STR, None),
    "fieldPath": (7, STR, None),
}
_EVENT_SOURCE: Table = {"component": (1, STR, None), "host": (2, STR, None)}
# The same two fields in both groups; only core/v1's count is omitempty in Go.
_EVENT_SERIES: Table = {"count": (1, INT0, None), "lastObservedTime": (2, MICROTIME, None)}
_EVENT_SERIES_V1: Table = {"count": (1, INT, None), "lastObservedTime": (2, MICROTIME, None)}

NAMESPACE: Table = {
    "metadata": (1, MSG, OBJECT_META),
    "spec": (2, MSG, {"finalizers": (1, STRS, None)}),
    "status": (3, MSG, {
        "phase": (1, STR, None),
        "conditions": (2, MSGS, {
            "type": (1, STR, None), "status": (2, STR, None),
            "lastTransitionTime": (4, TIME, None), "reason": (5, STR, None),
            "message": (6, STR, None),
        }),
    }),
}  # fmt: skip
EVENT: Table = {
    "metadata": (1, MSG, OBJECT_META),
    "involvedObject": (2, MSG, OBJECT_REFERENCE),
    "reason": (3, STR, None),
    "message": (4, STR, None),
    "source": (5, MSG, _EVENT_SOURCE),
    "firstTimestamp": (6, TIME, None),
    "lastTimestamp": (7, TIME, None),
    "count": (8, INT0, None),
    "type": (9, STR, None),
    "eventTime": (10, MICROTIME, None),
    "series": (11, MSG, _EVENT_SERIES),
    "action": (12, STR, None),
    "related": (13, MSG, OBJECT_REFERENCE),
    "reportingComponent": (14, STR, None),
    "reportingInstance": (15, STR, None),
}
EVENT_V1: Table = {
    "metadata": (1, MSG, OBJECT_META),
    "eventTime": (2, MICROTIME, None),
    "series": (3, MSG, _EVENT_SERIES_V1),
    "reportingController": (4, STR, None),
    "reportingInstance": (5, STR, None),
    "action": (6, STR, None),
    "reason": (7, STR, None),
    "regarding": (8, MSG, OBJECT_REFERENCE),
    "related": (9, MSG, OBJECT_REFERENCE),
    "note": (10, STR, None),
    "type": (11, STR, None),
    "deprecatedSource": (12, MSG, _EVENT_SOURCE),
    "deprecatedFirstTimestamp": (13, TIME, None),
    "deprecatedLastTimestamp": (14, TIME, None),
    "deprecatedCount": (15, INT0, None),
}
# meta.v1.DeleteOptions: every scalar is a pointer in Go, so a zero on the wire is a value.
DELETE_OPTIONS: Table = {
    "gracePeriodSeconds": (1, INT, None),
    "preconditions": (2, MSG, {"uid": (1, STR, None), "resourceVersion": (2, STR, None)}),
    "orphanDependents": (3, BOOL, None),
    "propagationPolicy": (4, STR, None),
    "dryRun": (5, STRS, None),
    "ignoreStoreReadErrorWithClusterBreakingPotential": (6, BOOL, None),
}

# The message of each stored kind by (apiVersion, kind), as the protobuf envelope names it.
MESSAGES: dict[tuple[str, str], Table] = {
    ("v1", "Pod"): POD,
    ("v1", "Namespace"): in_field_order(NAMESPACE),
    ("v1", "Event"): in_field_order(EVENT),
    ("events.k8s.io/v1", "Event"): in_field_order(EVENT_V1),
    ("certificates.k8s.io/v1", "CertificateSigningRequest"): CERTIFICATE_SIGNING_REQUEST,
}
in_field_order(DELETE_OPTIONS)
