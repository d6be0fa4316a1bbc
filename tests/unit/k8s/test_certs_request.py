"""What the daemon asks for: the key, the request and the CertificateSigningRequest object, as
client-go's certificate manager makes them for upstream's template."""

from __future__ import annotations

import base64

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from multusd.k8s.certs.csr import (
    KUBE_APISERVER_CLIENT,
    USAGES,
    CertificateRequest,
    RequestRefused,
    expiration_seconds,
    issued_certificate,
    request_body,
)
from multusd.k8s.certs.keys import RequestSubject, new_request, parse_request_subject

SUBJECT = RequestSubject("system:multus:node-a", ("system:multus",))


def test_key_and_request() -> None:
    key_pem, request_pem = new_request(SUBJECT)
    assert key_pem.startswith(b"-----BEGIN EC PRIVATE KEY-----")  # client-go's block type
    request = x509.load_pem_x509_csr(request_pem)
    assert request.is_signature_valid
    public = request.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.curve.name == "secp256r1"
    # Go's pkix.Name order: O before CN.
    assert [a.oid for a in request.subject] == [NameOID.ORGANIZATION_NAME, NameOID.COMMON_NAME]
    assert request.subject.rfc4514_string() == "CN=system:multus:node-a,O=system:multus"
    assert parse_request_subject(request_pem) == SUBJECT


def test_every_request_has_a_new_key() -> None:
    assert new_request(SUBJECT)[0] != new_request(SUBJECT)[0]


def test_the_object_posted() -> None:
    body = request_body(b"PEM", signer=KUBE_APISERVER_CLIENT, usages=USAGES, expiration=600)
    assert body == {
        "kind": "CertificateSigningRequest",
        "apiVersion": "certificates.k8s.io/v1",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64.b64encode(b"PEM").decode(),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "expirationSeconds": 600,
            "usages": ["digital signature", "client auth"],
        },
    }
    without = request_body(b"PEM", signer=KUBE_APISERVER_CLIENT, usages=USAGES, expiration=None)
    assert "expirationSeconds" not in without["spec"]


@pytest.mark.parametrize(
    ("ns", "seconds"),
    [
        (600 * 10**9, 600),
        (1_500_000_000, 1),  # truncated
        (-1_500_000_000, -1),  # toward zero
        (3600 * 10**9 * 1_000_000, -694_967_296),  # int32 wraps, as Go's conversion
    ],
)
def test_expiration_seconds_as_go_computes_them(ns: int, seconds: int) -> None:
    assert expiration_seconds(ns) == seconds


def csr(*conditions: dict[str, str], certificate: bytes = b"", uid: str = "u1") -> dict:  # type: ignore[type-arg]
    status: dict[str, object] = {"conditions": list(conditions)}
    if certificate:
        status["certificate"] = base64.b64encode(certificate).decode()
    return {"metadata": {"name": "csr-x", "uid": uid}, "status": status}


REQUEST = CertificateRequest("csr-x", "u1")


def test_issued_only_when_approved_and_certificate_set() -> None:
    assert issued_certificate(csr(), REQUEST) is None
    assert issued_certificate(csr(certificate=b"C"), REQUEST) is None
    assert issued_certificate(csr({"type": "Approved"}), REQUEST) is None
    assert issued_certificate(csr({"type": "Approved"}, certificate=b"C"), REQUEST) == b"C"


@pytest.mark.parametrize(
    ("obj", "text"),
    [
        (csr({"type": "Denied", "reason": "R", "message": "no"}),
         "certificate signing request is denied, reason: R, message: no"),
        (csr({"type": "Approved"}, {"type": "Failed", "reason": "SignerValidationFailure",
                                    "message": "bad"}),
         "certificate signing request failed, reason: SignerValidationFailure, message: bad"),
        (csr(uid="u2"), 'csr "csr-x" changed UIDs'),
    ],
)  # fmt: skip
def test_refusals_in_client_gos_words(obj: dict, text: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(RequestRefused) as info:
        issued_certificate(obj, REQUEST)
    assert str(info.value) == text
