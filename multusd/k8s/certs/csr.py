"""One CertificateSigningRequest: sent, then watched until it is issued, denied or failed.

client-go's ``csr.RequestCertificate`` and ``csr.WaitForCertificate``, on our client: the request
is created with ``generateName: csr-`` (the API server names it and fills in who asked:
``spec.username``, ``groups``), then listed and watched by ``metadata.name`` until a condition
settles it. ``Approved`` with ``status.certificate`` is the certificate; ``Denied`` and
``Failed`` end the wait with client-go's texts, as do a deleted request and one whose UID changed
(someone else's request under the same name). A watch the server ends is watched again from the
last version seen; one too old (410) is listed again, and a transient failure (the server
away, a 5xx) a second later. The caller bounds the whole wait.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass
from typing import Any

from multusd.k8s.client import KubeClient
from multusd.k8s.errors import ApiError, Gone, is_transient

__all__ = [
    "CSR_PATH",
    "KUBE_APISERVER_CLIENT",
    "USAGES",
    "CertificateRequest",
    "RequestRefused",
    "expiration_seconds",
    "request_certificate",
    "wait_for_certificate",
]

log = logging.getLogger(__name__)

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
"""``certificatesv1.KubeAPIServerClientSignerName``: client certificates the API server trusts."""
USAGES = ("digital signature", "client auth")
"""Upstream's ``certUsages``: ``UsageDigitalSignature``, ``UsageClientAuth``."""
_WATCH_SECONDS = 300  # each watch's timeoutSeconds; the caller's deadline bounds the whole wait
_RETRY_SECONDS = 1.0  # after a transient failure of the list or watch (client-go's informer
# goes on watching too)

Obj = dict[str, Any]


class RequestRefused(Exception):
    """The request will never be issued: denied, failed, deleted, or replaced (client-go's
    texts)."""


@dataclass(frozen=True, slots=True)
class CertificateRequest:
    """What the API server named a request we created."""

    name: str
    uid: str


def expiration_seconds(duration_ns: int) -> int:
    """``csr.DurationToExpirationSeconds``: ``int32(d / time.Second)``, truncated toward zero
    and wrapped to 32 bits as Go's conversion wraps."""
    seconds = abs(duration_ns) // 1_000_000_000
    if duration_ns < 0:
        seconds = -seconds
    return (seconds + 2**31) % 2**32 - 2**31


def request_body(
    request_pem: bytes, *, signer: str, usages: tuple[str, ...], expiration: int | None
) -> Obj:
    """The object client-go posts (``RequestCertificate`` with no name: ``generateName``)."""
    spec: Obj = {
        "request": base64.b64encode(request_pem).decode("ascii"),
        "signerName": signer,
    }
    if expiration is not None:
        spec["expirationSeconds"] = expiration
    spec["usages"] = list(usages)
    return {
        "kind": "CertificateSigningRequest",
        "apiVersion": "certificates.k8s.io/v1",
        "metadata": {"generateName": "csr-"},
        "spec": spec,
    }


async def request_certificate(
    client: KubeClient,
    request_pem: bytes,
    *,
    signer: str = KUBE_APISERVER_CLIENT,
    usages: tuple[str, ...] = USAGES,
    expiration: int | None,
) -> CertificateRequest:
    """Create the request; its name and UID (``ApiError`` when the server refuses it)."""
    body = request_body(request_pem, signer=signer, usages=usages, expiration=expiration)
    created = await client.post(CSR_PATH, body)
    meta = created.get("metadata") or {}
    return CertificateRequest(str(meta.get("name", "")), str(meta.get("uid", "")))


def issued_certificate(csr: Obj, request: CertificateRequest) -> bytes | None:
    """The certificate once ``csr`` is approved and issued, ``None`` while it is not yet;
    :class:`RequestRefused` when it never will be (client-go's condition function)."""
    meta = csr.get("metadata") or {}
    if meta.get("uid") != request.uid:
        raise RequestRefused(f'csr "{request.name}" changed UIDs')
    status = csr.get("status") or {}
    approved = False
    for condition in status.get("conditions") or ():
        kind = condition.get("type")
        reason, message = condition.get("reason", ""), condition.get("message", "")
        if kind == "Denied":
            raise RequestRefused(
                f"certificate signing request is denied, reason: {reason}, message: {message}"
            )
        if kind == "Failed":
            raise RequestRefused(
                f"certificate signing request failed, reason: {reason}, message: {message}"
            )
        if kind == "Approved":
            approved = True
    certificate = status.get("certificate")
    if not approved:
        return None
    if not certificate:
        log.debug("certificate signing request %s is approved, waiting to be issued", request.name)
        return None
    log.debug("certificate signing request %s is issued", request.name)
    return base64.b64decode(certificate)


async def wait_for_certificate(client: KubeClient, request: CertificateRequest) -> bytes:
    """List and watch the request until :func:`issued_certificate` says it is settled; the
    caller's timeout ends the wait (client-go: 15 minutes per request)."""
    selector = {"fieldSelector": f"metadata.name={request.name}"}
    version = ""
    while True:
        try:
            if not version:
                listed = await client.get(CSR_PATH, selector)
                for item in listed.get("items") or ():
                    found = issued_certificate(item, request)
                    if found is not None:
                        return found
                version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
            found, version = await _watch(client, request, selector, version)
            if found is not None:
                return found
        except Gone:
            version = ""  # too old to resume: list again
        except ApiError as exc:
            if not is_transient(exc):
                raise
            log.debug("waiting for %s: %s; again in %gs", request.name, exc, _RETRY_SECONDS)
            await asyncio.sleep(_RETRY_SECONDS)


async def _watch(
    client: KubeClient, request: CertificateRequest, selector: dict[str, str], version: str
) -> tuple[bytes | None, str]:
    """One watch from ``version``: the certificate if it came, and the last version seen."""
    params = {
        **selector,
        "resourceVersion": version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(_WATCH_SECONDS),
    }
    async with client.watch(CSR_PATH, params) as events:
        async for event in events:
            kind, obj = event.get("type"), event.get("object") or {}
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "DELETED":
                raise RequestRefused(f'csr "{request.name}" was deleted')
            if kind not in ("ADDED", "MODIFIED"):
                continue
            found = issued_certificate(obj, request)
            if found is not None:
                return found, version
    return None, version
