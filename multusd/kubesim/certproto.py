"""The protobuf message of ``certificates.k8s.io/v1`` CertificateSigningRequest, as a table of
the format ``multusd.kubesim.podproto`` describes (registered in ``multusd.kubesim.kindproto``).

kubectl's typed commands send built-in kinds as protobuf: ``kubectl certificate approve``
(1.32) PUTs the request to its ``approval`` subresource in protobuf, which the emulator must
read, and a client asking for protobuf first gets it. Field numbers are ``k8s.io/api``
``certificates/v1/generated.proto``'s. ``request`` and ``certificate`` are Go ``[]byte``: raw
on the wire, base64 in JSON (``BYTES``). ``spec.extra`` (a map of string lists) is not in the
table: the emulator's users carry no extra attributes. Nodes have no table: they are read and
written as JSON (``kubectl apply`` sends JSON), and a protobuf-first client gets JSON back.
"""

from __future__ import annotations

from multusd.kubesim.podproto import (
    BYTES,
    INT,
    MSG,
    MSGS,
    OBJECT_META,
    STR,
    STRS,
    TIME,
    Table,
    in_field_order,
)

__all__ = ["CERTIFICATE_SIGNING_REQUEST"]

CERTIFICATE_SIGNING_REQUEST: Table = in_field_order({
    "metadata": (1, MSG, OBJECT_META),
    "spec": (2, MSG, {
        "request": (1, BYTES, None),
        "username": (2, STR, None),
        "uid": (3, STR, None),
        "groups": (4, STRS, None),
        "usages": (5, STRS, None),
        "signerName": (7, STR, None),
        "expirationSeconds": (8, INT, None),  # *int32: a zero is a value
    }),
    "status": (3, MSG, {
        "conditions": (1, MSGS, {
            "type": (1, STR, None),
            "reason": (2, STR, None),
            "message": (3, STR, None),
            "lastUpdateTime": (4, TIME, None),
            "lastTransitionTime": (5, TIME, None),
            "status": (6, STR, None),
        }),
        "certificate": (2, BYTES, None),
    }),
})  # fmt: skip
