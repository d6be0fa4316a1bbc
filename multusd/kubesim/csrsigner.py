"""The emulator's certificate signer: what kube-controller-manager's ``csrsigning`` controller does
for ``kubernetes.io/kube-apiserver-client``, with the emulator's CA.

An approved request for that signer, not yet issued nor failed, gets a certificate in
``status.certificate`` (through the ``status`` subresource, as the controller writes it):

* the subject and the SANs of the request, its public key, signed by the emulator's CA (the one
  its TLS serving certificate and the client certificates it accepts come from, so a client
  can use what it was issued right away: ``multusd.kubesim.authn``);
* the usages asked for, which must be client ones: ``client auth``, and optionally ``digital
  signature`` and ``key encipherment``; anything else (or no ``client auth``) is the condition
  ``Failed``, reason ``SignerValidationFailure``, with the controller's message;
* the lifetime of ``expirationSeconds``, at most ``Settings.csr_signing_duration``
  (``--cluster-signing-duration``, a year), ``NotBefore`` set back by
  ``Settings.csr_backdate_seconds`` (the controller's 5 minutes; tests that issue certificates
  of seconds set it lower), ``NotAfter`` at now + TTL when the TTL is under 8 hours (a "short"
  certificate's end is not backdated), now + TTL - backdate otherwise, and never past the CA's
  own (``PermissiveSigningPolicy``).

Requests for other signers are left alone, as they are on a cluster without a signer for them.
The signer watches the store like any controller watches the API (a watcher of the store, so
requests approved through HTTP, ``kubectl certificate approve`` or the in-process handle are all
seen), signs in a worker thread, and runs only in TLS mode, where there is a CA. Its task is
started and stopped by ``KubeSim`` (``start``/``stop``).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID

from multusd.kubesim import operations
from multusd.kubesim.certresources import CERTIFICATE_SIGNING_REQUESTS
from multusd.kubesim.errors import ApiError
from multusd.kubesim.selectors import FieldSelector, LabelSelector
from multusd.kubesim.state import State
from multusd.kubesim.watchcache import DELETED, Watcher

__all__ = ["KUBE_APISERVER_CLIENT", "Signer", "sign_request"]

log = logging.getLogger(__name__)

KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
SHORT = 8 * 3600.0
"""The controller's ``Short``: below this TTL a certificate's end is not backdated."""
_OPTIONAL_USAGES = frozenset({"digital signature", "key encipherment"})

Obj = dict[str, Any]


class SignerRefusal(ValueError):
    """The request is not one this signer issues (the ``Failed`` condition's message)."""


@dataclass(frozen=True, slots=True)
class Authority:
    """The CA that signs: its certificate and key."""

    certificate: x509.Certificate
    key: CertificateIssuerPrivateKeyTypes

    @classmethod
    def load(cls, cert_file: Path, key_file: Path) -> Authority:
        certificate = x509.load_pem_x509_certificate(cert_file.read_bytes())
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        return cls(certificate, key)  # type: ignore[arg-type]


def check_usages(usages: list[str]) -> None:
    """The controller's ``validAPIServerClientUsages``."""
    has_client_auth = False
    for usage in usages:
        if usage == "client auth":
            has_client_auth = True
        elif usage not in _OPTIONAL_USAGES:
            raise SignerRefusal(f"invalid usage for client certificate: {usage}")
    if not has_client_auth:
        raise SignerRefusal("missing required usage for client certificate: client auth")


def sign_request(
    authority: Authority,
    request_pem: bytes,
    usages: list[str],
    *,
    ttl: float,
    backdate: float,
    now: datetime.datetime | None = None,
) -> bytes:
    """A certificate for ``request_pem``, as ``PermissiveSigningPolicy`` makes one (PEM)."""
    request = x509.load_pem_x509_csr(request_pem)
    now = now or datetime.datetime.now(datetime.UTC)
    not_before = now - datetime.timedelta(seconds=backdate)
    if ttl < SHORT:
        not_after = now + datetime.timedelta(seconds=ttl)
    else:
        not_after = now + datetime.timedelta(seconds=ttl - backdate)
    not_after = min(not_after, authority.certificate.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(request.subject)
        .issuer_name(authority.certificate.subject)
        .public_key(request.public_key())
        .serial_number(int.from_bytes(secrets.token_bytes(16), "big") >> 1)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()),
            critical=False,
        )
    )
    signing = "digital signature" in usages
    enciphering = "key encipherment" in usages
    if signing or enciphering:  # Go writes no key usage extension when no bit is set
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=signing, content_commitment=False,
                key_encipherment=enciphering, data_encipherment=False, key_agreement=False,
                key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
    try:
        names = request.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        pass
    else:
        builder = builder.add_extension(names.value, critical=False)
    certificate = builder.sign(authority.key, hashes.SHA256())
    return certificate.public_bytes(serialization.Encoding.PEM)


def _wants_signing(csr: Obj) -> bool:
    spec = csr.get("spec") or {}
    status = csr.get("status") or {}
    if spec.get("signerName") != KUBE_APISERVER_CLIENT or status.get("certificate"):
        return False
    types = {c.get("type") for c in status.get("conditions") or () if isinstance(c, dict)}
    return "Approved" in types and "Failed" not in types and "Denied" not in types


class Signer:
    """The controller: a store watcher, and one task that signs what it sees approved."""

    def __init__(self, state: State, ca_cert_file: Path, ca_key_file: Path) -> None:
        self.state = state
        self.ca_cert_file = ca_cert_file
        self.ca_key_file = ca_key_file
        self.issued = 0
        self.failed = 0
        self._authority: Authority | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._authority = await asyncio.to_thread(
            Authority.load, self.ca_cert_file, self.ca_key_file
        )
        self._task = asyncio.create_task(self._run(), name="kubesim-csr-signer")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _subscribe(self) -> Watcher:
        return self.state.store.subscribe(
            CERTIFICATE_SIGNING_REQUESTS,
            namespace=None,
            labels=LabelSelector(()),
            fields=FieldSelector(()),
            since=None,
        )

    async def _run(self) -> None:
        watcher = self._subscribe()
        try:
            while True:
                await watcher.wakeup.wait()
                for item in watcher.take():
                    if item.raw is None or item.type == DELETED:
                        continue
                    csr = json.loads(item.raw)
                    if _wants_signing(csr):
                        await self._sign(str(csr["metadata"]["name"]))
                if watcher.closed:  # reset by a restore, or overflowing: look at all again
                    self.state.store.unsubscribe(watcher)
                    watcher = self._subscribe()
        finally:
            self.state.store.unsubscribe(watcher)

    async def _sign(self, name: str) -> None:
        """Issue (or fail) the request as it is stored now."""
        rt = CERTIFICATE_SIGNING_REQUESTS
        try:
            csr = operations.get(self.state, rt, "", name).decode()
        except ApiError:
            return  # deleted meanwhile
        if not _wants_signing(csr) or self._authority is None:
            return
        spec = csr.get("spec") or {}
        status = dict(csr.get("status") or {})
        settings = self.state.settings
        usages = [str(u) for u in spec.get("usages") or ()]
        try:
            check_usages(usages)
            seconds = spec.get("expirationSeconds")
            ttl = settings.csr_signing_duration
            if isinstance(seconds, int) and seconds > 0:
                ttl = min(float(seconds), ttl)
            request_pem = base64.b64decode(str(spec.get("request", "")))
            certificate = await asyncio.to_thread(
                sign_request, self._authority, request_pem, usages,
                ttl=ttl, backdate=settings.csr_backdate_seconds,
            )  # fmt: skip
        except (SignerRefusal, ValueError) as exc:
            self.failed += 1
            status["conditions"] = [
                *(status.get("conditions") or ()),
                {"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                 "message": str(exc)},
            ]  # fmt: skip
        else:
            self.issued += 1
            status["certificate"] = base64.b64encode(certificate).decode("ascii")
        csr["status"] = status
        try:
            operations.update(self.state, rt, "", name, csr, subresource="status")
        except ApiError as exc:  # changed meanwhile: its next event brings it back here
            log.info("kubesim signer: %s not updated: %s", name, exc)
