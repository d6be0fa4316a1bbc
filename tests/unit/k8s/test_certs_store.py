"""The certificate on disk, laid out as client-go's file store lays it out: dated 0600 files,
``multus-client-current.pem`` a link to the one in use, recovery of an interrupted rotation, and
the errors of a store that is not one."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from multusd.k8s.certs.keys import CertificateError, RequestSubject, new_request
from multusd.k8s.certs.store import CertificateStore, NoCertificateError

SUBJECT = RequestSubject("system:multus:node-a", ("system:multus",))


def issue(request_pem: bytes, *, lifetime: float = 600.0) -> bytes:
    """A certificate for ``request_pem``, self-issued by a throwaway CA."""
    request = x509.load_pem_x509_csr(request_pem)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(request.subject)
        .issuer_name(name)
        .public_key(request.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(seconds=60))
        .not_valid_after(now + datetime.timedelta(seconds=lifetime))
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def pair() -> tuple[bytes, bytes]:
    key, request = new_request(SUBJECT)
    return issue(request), key


async def test_no_pair_is_client_gos_error(tmp_path: Path) -> None:
    store = CertificateStore(str(tmp_path))
    with pytest.raises(NoCertificateError) as info:
        await store.current()
    assert str(info.value) == (
        f'no cert/key files read at "{tmp_path}/multus-client-current.pem", ("", "") or '
        f'("{tmp_path}", "{tmp_path}")'
    )


async def test_update_writes_a_dated_0600_file_and_links_it(tmp_path: Path) -> None:
    store = CertificateStore(str(tmp_path / "certs"))
    certificate, key = pair()
    issued = await store.update(certificate, key)
    current = tmp_path / "certs" / "multus-client-current.pem"
    assert current.is_symlink()
    target = Path(os.readlink(current))
    assert target.is_absolute() and target.name.startswith("multus-client-20")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    data = target.read_bytes()
    assert data.index(b"CERTIFICATE") < data.index(b"EC PRIVATE KEY")  # certificates first
    assert issued.subject == SUBJECT
    loaded = await store.current()
    assert loaded.pem == data and loaded.not_after == issued.not_after
    assert not list((tmp_path / "certs").glob(".*"))  # no temporary file left


async def test_renewals_replace_the_link_and_prune_old_pairs(tmp_path: Path) -> None:
    store = CertificateStore(str(tmp_path))
    dated: list[str] = []
    for second in range(4):
        # One file per second upstream (the name is the time): name them apart here.
        certificate, key = pair()
        await store.update(certificate, key)
        target = Path(os.readlink(store.current_path))
        renamed = target.with_name(f"multus-client-2000-01-01-00-00-0{second}.pem")
        target.rename(renamed)
        store.current_path.unlink()
        store.current_path.symlink_to(renamed)
        dated.append(renamed.name)
    certificate, key = pair()
    await store.update(certificate, key)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "multus-client-current.pem" in names
    kept = [n for n in names if n != "multus-client-current.pem"]
    assert len(kept) == 2  # the new pair and the one before it
    assert dated[-1] in kept


async def test_recover_finishes_an_interrupted_rotation(tmp_path: Path) -> None:
    store = CertificateStore(str(tmp_path))
    certificate, key = pair()
    await store.update(certificate, key)
    target = os.readlink(store.current_path)
    store.current_path.unlink()
    store.updated_path.symlink_to(target)  # crashed between the new link and its rename
    await store.recover()
    assert os.readlink(store.current_path) == target
    assert not store.updated_path.exists()


async def test_a_plain_current_file_is_refused_as_client_go_refuses_it(tmp_path: Path) -> None:
    store = CertificateStore(str(tmp_path))
    certificate, key = pair()
    store.current_path.write_bytes(certificate + key)
    assert (await store.current()).subject == SUBJECT  # read, as client-go reads it
    with pytest.raises(CertificateError, match="to be a symlink but it is a file"):
        await store.update(*pair())


async def test_fallback_crt_and_key(tmp_path: Path) -> None:
    certificate, key = pair()
    (tmp_path / "multus-client.crt").write_bytes(certificate)
    (tmp_path / "multus-client.key").write_bytes(key)
    assert (await CertificateStore(str(tmp_path)).current()).subject == SUBJECT


async def test_a_key_of_another_certificate_is_refused(tmp_path: Path) -> None:
    certificate, _ = pair()
    _, other_key = pair()
    store = CertificateStore(str(tmp_path))
    with pytest.raises(CertificateError, match="private key does not match public key"):
        await store.update(certificate, other_key)
    assert not store.current_path.exists()
