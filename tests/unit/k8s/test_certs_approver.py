"""The cert approver's decisions, check for check and text for text with upstream's
``cmd/cert-approver``: which requests it looks at, which it approves, and why it leaves the
others alone."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from multusd.k8s.certs.approver import (
    ApproverError,
    Decision,
    approval_body,
    csr_event,
    decide,
    wanted,
)
from multusd.k8s.certs.keys import RequestSubject, new_request

Obj = dict[str, Any]


def csr(
    *,
    cn: str = "system:multus:node-a",
    orgs: tuple[str, ...] = ("system:multus",),
    username: str = "system:node:node-a",
    groups: tuple[str, ...] = ("system:nodes", "system:authenticated"),
    usages: tuple[str, ...] = ("digital signature", "client auth"),
    signer: str = "kubernetes.io/kube-apiserver-client",
    expiration: int | None = 600,
    status: Obj | None = None,
    request: str | None = None,
) -> Obj:
    if request is None:
        request = base64.b64encode(new_request(RequestSubject(cn, orgs))[1]).decode()
    spec: Obj = {
        "request": request,
        "signerName": signer,
        "usages": list(usages),
        "username": username,
        "groups": list(groups),
    }
    if expiration is not None:
        spec["expirationSeconds"] = expiration
    return {"metadata": {"name": "csr-1", "uid": "u", "resourceVersion": "7"}, "spec": spec,
            "status": status or {}}  # fmt: skip


def test_the_bootstrap_request_is_approved() -> None:
    assert decide(csr()) == Decision(True, "node-a", 'Auto-approved CSR "csr-1"')


def test_a_renewal_by_the_node_itself_is_approved() -> None:
    renewal = csr(username="system:multus:node-a", groups=("system:multus", "system:authenticated"))
    assert decide(renewal) == Decision(True, "node-a", 'Auto-approved CSR "csr-1"')


def test_no_node_check() -> None:
    # Upstream does not look the node up: any DNS subdomain named by the requester will do.
    assert decide(csr(username="system:node:gone", cn="system:multus:gone")).approve  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"username": "alice:node-a"},
         'CSR "csr-1" was created by an unexpected user: "alice:node-a"'),
        ({"username": "system:serviceaccount:kube-system:multus"},
         'CSR "csr-1" was created by an unexpected user: '
         '"system:serviceaccount:kube-system:multus"'),
        ({"username": "system:node:Node_A"},
         'extracted node name "Node_A" is not a valid DNS subdomain [a lowercase RFC 1123 '
         "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
         "start and end with an alphanumeric character (e.g. 'example.com', regex used for "
         "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')]"),
        ({"usages": ("client auth",)},
         'CSR "csr-1" was created with unexpected usages: [client auth]'),
        ({"usages": ("digital signature", "client auth", "key encipherment")},
         'CSR "csr-1" was created with unexpected usages: [client auth digital signature key '
         "encipherment]"),
        ({"groups": ("system:nodes", "system:masters")},
         'CSR "csr-1" was created by a user with unexpected groups: [system:nodes system:masters]'),
        ({"cn": "system:multus:node-b"},
         "expected the CSR's commonName to be \"system:multus:node-a\", but it is "
         '"system:multus:node-b"'),
        ({"orgs": ("system:multus", "extra")},
         "expected the CSR's organization to be [system:multus], but it is [system:multus extra]"),
        ({"orgs": ()},
         "expected the CSR's organization to be [system:multus], but it is []"),
        ({"expiration": None},
         'CSR "csr-1" was created without specyfying the expirationSeconds'),
        ({"expiration": 365 * 24 * 3600 + 1},
         'CSR "csr-1" was created with invalid expirationSeconds value: 31536001'),
    ],
)  # fmt: skip
def test_left_alone_with_upstreams_reason(kw: Obj, message: str) -> None:
    decision = decide(csr(**kw))
    assert decision is not None and not decision.approve
    assert decision.message == message


def test_a_year_exactly_is_fine() -> None:
    assert decide(csr(expiration=365 * 24 * 3600)).approve  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "status",
    [
        {"certificate": "Qw=="},
        {"conditions": [{"type": "Approved", "status": "True"}]},
        {"conditions": [{"type": "Denied", "status": "True"}]},
    ],
)
def test_settled_requests_are_not_touched(status: Obj) -> None:
    assert decide(csr(status=status, username="nobody")) is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"request": base64.b64encode(b"junk").decode()},
         "failed to PEM-parse the CSR block in .spec.request: no CSRs were found"),
        ({"request": base64.b64encode(b"-----BEGIN CERTIFICATE REQUEST-----\nQUJD\n"
                                      b"-----END CERTIFICATE REQUEST-----\n").decode()},
         "failed to parse the CSR bytes"),
        ({"username": "nocolon"}, "failed to parse the username: nocolon"),
        ({"username": "system:node:"}, "failed to parse the username: system:node:"),
    ],
)  # fmt: skip
def test_unreadable_requests_are_errors_to_retry(kw: Obj, message: str) -> None:
    with pytest.raises(ApproverError) as info:
        decide(csr(**kw))
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, True),
        ({"cn": "system:multusX:node-a"}, True),  # a prefix, as upstream: then left alone
        ({"cn": "system:node:node-a"}, False),
        ({"signer": "kubernetes.io/kube-apiserver-client-kubelet"}, False),
        ({"request": base64.b64encode(b"junk").decode()}, False),
    ],
)
def test_which_requests_are_looked_at(kw: Obj, expected: bool) -> None:
    assert wanted(csr(**kw)) is expected


def test_the_approval() -> None:
    body = approval_body(csr(status={"conditions": [{"type": "Other", "status": "True"}]}))
    assert body["apiVersion"] == "certificates.k8s.io/v1"
    assert body["kind"] == "CertificateSigningRequest"
    assert body["metadata"]["resourceVersion"] == "7"  # an update of what was seen
    assert body["status"]["conditions"] == [
        {"type": "Other", "status": "True"},
        {"type": "Approved", "status": "True", "reason": "AutoApproved",
         "message": 'Auto-approved CSR "csr-1"'},
    ]  # fmt: skip


def test_the_events() -> None:
    event = csr_event(
        csr(), "Normal", "CSRApproved", 'CSR "csr-1" has been approved by csr-approver'
    )
    assert event["metadata"]["namespace"] == "default"
    assert event["involvedObject"] == {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "name": "csr-1",
        "uid": "u",
        "resourceVersion": "7",
    }
    assert event["source"] == {"component": "cert-approver"}
    assert (event["type"], event["reason"]) == ("Normal", "CSRApproved")
