"""Keys, certificate requests and issued pairs: the cryptography the per-node certificate needs.

What client-go's certificate manager does, with the ``cryptography`` package: a fresh ECDSA
P-256 key for every request (``ecdsa.GenerateKey(elliptic.P256())``, written as an ``EC PRIVATE
KEY`` PEM block), a PKCS#10 request signed with it whose subject is the template's (Go writes
``O`` before ``CN``: ``pkix.Name.ToRDNSequence``'s order), and the issued certificate read back
for what the manager decides with: its validity and its subject.

Everything here is synchronous and CPU-bound or file-bound; callers run it in a worker thread
(``asyncio.to_thread``): key generation takes about a millisecond, and an SSL context reads its
files. This module is imported only when per-node certificates are enabled (or by the approver):
``cryptography`` costs the process about 10 MiB, which the default daemon does not pay.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = [
    "CertificateError",
    "IssuedPair",
    "RequestSubject",
    "client_ssl_context",
    "join_pair",
    "new_request",
    "parse_pair",
    "parse_request_subject",
]


class CertificateError(ValueError):
    """PEM data that is not what it should be (no certificate, no key, a key that is not the
    certificate's)."""


@dataclass(frozen=True, slots=True)
class RequestSubject:
    """The subject of a certificate or request: its common name and organizations."""

    common_name: str
    organizations: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IssuedPair:
    """A certificate chain and its key, as the store keeps them (one PEM file, certificates
    first), with what the manager reads from the leaf."""

    pem: bytes
    not_before: datetime.datetime
    not_after: datetime.datetime
    subject: RequestSubject

    @property
    def lifetime(self) -> float:
        """Seconds from ``not_before`` to ``not_after``: what the rotation deadline is a share
        of."""
        return (self.not_after - self.not_before).total_seconds()

    def expired(self, now: datetime.datetime) -> bool:
        return now >= self.not_after


def _subject_of(name: x509.Name) -> RequestSubject:
    common = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return RequestSubject(str(common[0].value) if common else "", tuple(str(o.value) for o in orgs))


def new_request(subject: RequestSubject) -> tuple[bytes, bytes]:
    """A new P-256 key and a certificate request for ``subject``: ``(key PEM, request PEM)``."""
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in subject.organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, subject.common_name))
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name(attributes))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,  # "EC PRIVATE KEY", as client-go's
        serialization.NoEncryption(),
    )
    return key_pem, request.public_bytes(serialization.Encoding.PEM)


def parse_request_subject(request_pem: bytes) -> RequestSubject:
    """The subject of a PEM certificate request (``CertificateError`` when it is none)."""
    try:
        request = x509.load_pem_x509_csr(request_pem)
    except ValueError as exc:
        raise CertificateError(f"failed to parse the CSR: {exc}") from exc
    return _subject_of(request.subject)


def parse_pair(pem: bytes) -> IssuedPair:
    """A chain and key in one PEM blob (the store's file), checked as Go's
    ``tls.X509KeyPair`` checks it: a certificate first, a private key, and the key the leaf's.
    """
    try:
        chain = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateError(f"failed to find any PEM data in certificate input: {exc}") from exc
    try:
        key = serialization.load_pem_private_key(_key_block(pem), password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"failed to find any PEM data in key input: {exc}") from exc
    leaf = chain[0]
    if leaf.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        raise CertificateError("private key does not match public key")
    return IssuedPair(
        pem=pem,
        not_before=leaf.not_valid_before_utc,
        not_after=leaf.not_valid_after_utc,
        subject=_subject_of(leaf.subject),
    )


def _key_block(pem: bytes) -> bytes:
    """The first private-key PEM block of ``pem`` (cryptography reads one block at a time)."""
    start = pem.find(b"-----BEGIN ")
    while start != -1:
        line_end = pem.find(b"-----", start + 11)
        label = pem[start + 11 : line_end]
        if label.endswith(b"PRIVATE KEY"):
            end_marker = b"-----END " + label + b"-----"
            end = pem.find(end_marker, line_end)
            if end != -1:
                return pem[start : end + len(end_marker)] + b"\n"
        start = pem.find(b"-----BEGIN ", line_end)
    raise CertificateError("failed to find any PEM data in key input")


def join_pair(certificate_pem: bytes, key_pem: bytes) -> bytes:
    """The store's one file: the certificates (leaf first), then the key (client-go's
    ``fileStore.Update`` writes them in that order)."""
    try:
        chain = x509.load_pem_x509_certificates(certificate_pem)
    except ValueError as exc:
        raise CertificateError(f"invalid certificate data: {exc}") from exc
    parts = [c.public_bytes(serialization.Encoding.PEM) for c in chain]
    key = _key_block(key_pem)
    return b"".join(parts) + key


def client_ssl_context(
    *, ca_file: str | None, pair_file: str, verify: bool = True, strict: bool = True
) -> ssl.SSLContext:
    """An SSL context that trusts ``ca_file`` (else the system's store) and presents the pair in
    ``pair_file``, as kubernetes_asyncio's ``RESTClientObject`` builds one from a
    ``Configuration`` (``verify_ssl``, ``disable_strict_ssl_verification``), but made off the
    loop (it reads files) so that a renewed certificate is swapped in without blocking it."""
    context = ssl.create_default_context(cafile=ca_file)
    context.load_cert_chain(pair_file, keyfile=pair_file)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if not strict:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context
