"""certificates.k8s.io/v1 CertificateSigningRequests in the emulator: the requester filled in
from who asked, the validation, the approval and status subresources, the signer issuing from
the emulator's CA, client-certificate authentication with what it issued, ``kubectl certificate
approve``, and Nodes."""

from __future__ import annotations

import base64
import datetime
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID

from multusd.k8s.certs.keys import RequestSubject, join_pair, new_request
from multusd.kubesim import KubeSim, Settings, kindproto, podproto, protodecode, protoencode
from multusd.kubesim.certresources import CERTIFICATE_SIGNING_REQUESTS
from multusd.kubesim.csrsigner import Authority, sign_request
from tests.kubesim.conftest import PROTOBUF, KubectlBinary
from tests.waits import eventually

Obj = dict[str, Any]
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
CLIENT = "kubernetes.io/kube-apiserver-client"
BOOT_TOKEN = "bootstrap-token-node-a"
SUBJECT = RequestSubject("system:multus:node-a", ("system:multus",))
Kubectl = Callable[..., Awaitable[tuple[int, str, str]]]


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    """A TLS emulator (its CA signs) with a kubelet-like bootstrap token for ``node-a``."""
    async with KubeSim(Settings(bookmark_interval=0.5), tls_enabled=True) as kubesim:
        kubesim.add_token(BOOT_TOKEN, "system:node:node-a", ("system:nodes",))
        yield kubesim


def context(sim: KubeSim, pair_file: Path | None = None) -> ssl.SSLContext:
    assert sim.tls is not None
    ctx = sim.tls.client_context()
    if pair_file is not None:
        ctx.load_cert_chain(str(pair_file))
    return ctx


def session(sim: KubeSim, *, token: str | None = None, pair_file: Path | None = None):  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    connector = aiohttp.TCPConnector(ssl=context(sim, pair_file))
    return aiohttp.ClientSession(sim.url, headers=headers, connector=connector)


def csr_body(
    name: str = "csr-a",
    *,
    subject: RequestSubject = SUBJECT,
    usages: tuple[str, ...] = ("digital signature", "client auth"),
    signer: str = CLIENT,
    expiration: int | None = 600,
    **spec: Any,
) -> tuple[Obj, bytes]:
    key, request = new_request(subject)
    body: Obj = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64.b64encode(request).decode(), "signerName": signer,
                 "usages": list(usages), **spec},
    }  # fmt: skip
    if expiration is not None:
        body["spec"]["expirationSeconds"] = expiration
    return body, key


async def create(http: aiohttp.ClientSession, body: Obj) -> tuple[int, Obj]:
    async with http.post(CSRS, json=body) as resp:
        return resp.status, await resp.json()


async def approve(
    http: aiohttp.ClientSession, name: str, kind: str = "Approved"
) -> tuple[int, Obj]:
    async with http.get(f"{CSRS}/{name}") as resp:
        csr = await resp.json()
    csr["status"].setdefault("conditions", []).append(
        {"type": kind, "status": "True", "reason": "Test", "message": "by the test"}
    )
    async with http.put(f"{CSRS}/{name}/approval", json=csr) as resp:
        return resp.status, await resp.json()


def stored(sim: KubeSim, name: str) -> Obj:
    return sim.get("certificatesigningrequests", "", name, group="certificates.k8s.io")


async def issued(sim: KubeSim, name: str) -> x509.Certificate:
    async def present() -> bool:
        return bool(stored(sim, name)["status"].get("certificate"))

    await eventually(present, 10, interval=0.02)
    return x509.load_pem_x509_certificate(
        base64.b64decode(stored(sim, name)["status"]["certificate"])
    )


async def test_the_requester_is_who_asked_and_the_status_starts_empty(sim: KubeSim) -> None:
    body, _ = csr_body(username="system:admin", groups=["system:masters"])
    body["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    async with session(sim, token=BOOT_TOKEN) as http:
        status, created = await create(http, body)
    assert status == 201
    assert created["spec"]["username"] == "system:node:node-a"
    assert created["spec"]["groups"] == ["system:nodes", "system:authenticated"]
    assert created["status"] == {}
    assert stored(sim, "csr-a")["spec"]["signerName"] == CLIENT


async def test_validation_in_the_api_servers_words(sim: KubeSim) -> None:
    async with session(sim, token=sim.token) as http:
        status, answer = await create(http, csr_body(expiration=599)[0])
        assert status == 422 and answer["reason"] == "Invalid"
        assert answer["message"] == (
            'CertificateSigningRequest.certificates.k8s.io "csr-a" is invalid: '
            "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than "
            "600 seconds (10 minutes)"
        )
        bad, _ = csr_body()
        bad["spec"]["request"] = base64.b64encode(b"not a request").decode()
        status, answer = await create(http, bad)
        assert status == 422 and "PEM block type must be CERTIFICATE REQUEST" in answer["message"]
        status, answer = await create(http, csr_body(usages=())[0])
        assert status == 422 and "spec.usages: Required value" in answer["message"]


async def test_a_shorter_minimum_for_tests() -> None:
    settings = Settings(csr_min_expiration_seconds=10)
    async with (
        KubeSim(settings, tls_enabled=True) as sim,
        session(sim, token=sim.token) as http,
    ):
        assert (await create(http, csr_body(expiration=10)[0]))[0] == 201
        status, answer = await create(http, csr_body("csr-b", expiration=9)[0])
    assert status == 422
    assert answer["message"].endswith("less than 10 seconds (10 seconds)")


async def test_approval_then_issuance_from_the_ca(sim: KubeSim) -> None:
    async with session(sim, token=BOOT_TOKEN) as http:
        await create(http, csr_body()[0])
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    async with session(sim, token=sim.token) as http:
        status, approved = await approve(http, "csr-a")
    assert status == 200
    (condition,) = approved["status"]["conditions"]
    assert condition["type"] == "Approved"
    assert condition["lastUpdateTime"] and condition["lastTransitionTime"]  # filled in
    cert = await issued(sim, "csr-a")
    assert cert.subject.rfc4514_string() == "CN=system:multus:node-a,O=system:multus"
    assert sim.tls is not None
    ca = x509.load_pem_x509_certificate(sim.tls.ca_pem)
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == (
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    )
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
    # A short certificate: NotBefore 5 minutes back, NotAfter at now + expirationSeconds.
    start = cert.not_valid_before_utc + datetime.timedelta(minutes=5)
    assert before - datetime.timedelta(seconds=1) <= start <= before + datetime.timedelta(seconds=5)
    assert cert.not_valid_after_utc - start == datetime.timedelta(seconds=600)
    assert sim.signer is not None and sim.signer.issued == 1


async def test_the_signing_policy(sim: KubeSim) -> None:
    """``PermissiveSigningPolicy``: backdated start; a long certificate's end backdated too;
    never past the CA's own end."""
    assert sim.tls is not None
    ca = Authority.load(sim.tls.ca_file, sim.tls.ca_key_file)
    now = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    _, request = new_request(SUBJECT)

    def span(ttl: float) -> tuple[datetime.datetime, datetime.datetime]:
        pem = sign_request(ca, request, ["client auth"], ttl=ttl, backdate=300, now=now)
        cert = x509.load_pem_x509_certificate(pem)
        return cert.not_valid_before_utc, cert.not_valid_after_utc

    minutes = datetime.timedelta(minutes=1)
    assert span(600) == (now - 5 * minutes, now + 10 * minutes)
    assert span(9 * 3600) == (now - 5 * minutes, now + 9 * 60 * minutes - 5 * minutes)
    assert span(100 * 365 * 24 * 3600)[1] == ca.certificate.not_valid_after_utc


async def test_what_each_update_may_change(sim: KubeSim) -> None:
    async with session(sim, token=sim.token) as http:
        await create(http, csr_body(signer="example.com/other")[0])
        # The object itself: a condition written there is dropped, as upstream's approver's
        # Update of a Denied condition is dropped by a real server.
        async with http.get(f"{CSRS}/csr-a") as resp:
            csr = await resp.json()
        version = csr["metadata"]["resourceVersion"]
        csr["status"] = {"conditions": [{"type": "Denied", "status": "True"}]}
        csr["spec"]["usages"] = ["server auth"]
        async with http.put(f"{CSRS}/csr-a", json=csr) as resp:
            assert resp.status == 200
            after = await resp.json()
        assert after["status"] == {} and after["spec"]["usages"] == [
            "digital signature",
            "client auth",
        ]
        assert after["metadata"]["resourceVersion"] == version  # nothing changed, nothing written
        status, _ = await approve(http, "csr-a")
        assert status == 200
        # Approved and Denied exclude each other; an approval stays.
        status, answer = await approve(http, "csr-a", "Denied")
        assert status == 422 and "mutually exclusive" in answer["message"]
        csr = stored(sim, "csr-a")
        csr["status"]["conditions"] = []
        async with http.put(f"{CSRS}/csr-a/approval", json=csr) as resp:
            assert resp.status == 422
            assert 'may not remove a condition of type "Approved"' in (await resp.json())["message"]
        # The status subresource keeps the approval and takes the rest.
        csr["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "X"}]}
        async with http.put(f"{CSRS}/csr-a/status", json=csr) as resp:
            assert resp.status == 200
            types = [c["type"] for c in (await resp.json())["status"]["conditions"]]
    assert types == ["Approved", "Failed"]
    assert "certificate" not in stored(sim, "csr-a")["status"]  # another signer: left alone


@pytest.mark.parametrize(
    ("usages", "message"),
    [
        (("server auth", "client auth"), "invalid usage for client certificate: server auth"),
        (("digital signature",), "missing required usage for client certificate: client auth"),
    ],
)
async def test_the_signer_fails_what_is_not_a_client_certificate(
    sim: KubeSim, usages: tuple[str, ...], message: str
) -> None:
    async with session(sim, token=sim.token) as http:
        await create(http, csr_body(usages=usages)[0])
        await approve(http, "csr-a")

    async def failed() -> bool:
        return any(c["type"] == "Failed" for c in stored(sim, "csr-a")["status"]["conditions"])

    await eventually(failed, 10, interval=0.02)
    condition = stored(sim, "csr-a")["status"]["conditions"][-1]
    assert (condition["reason"], condition["message"]) == ("SignerValidationFailure", message)
    assert "certificate" not in stored(sim, "csr-a")["status"]


async def test_field_selectors(sim: KubeSim) -> None:
    async with session(sim, token=sim.token) as http:
        await create(http, csr_body("csr-a")[0])
        await create(http, csr_body("csr-b", signer="example.com/x")[0])
        async with http.get(CSRS, params={"fieldSelector": "metadata.name=csr-b"}) as resp:
            assert [i["metadata"]["name"] for i in (await resp.json())["items"]] == ["csr-b"]
        async with http.get(CSRS, params={"fieldSelector": f"spec.signerName={CLIENT}"}) as resp:
            assert [i["metadata"]["name"] for i in (await resp.json())["items"]] == ["csr-a"]


async def test_client_certificates_authenticate(sim: KubeSim, short_tmp: Path) -> None:
    body, key = csr_body()
    async with session(sim, token=BOOT_TOKEN) as http:
        await create(http, body)
    async with session(sim, token=sim.token) as http:
        await approve(http, "csr-a")
    cert = await issued(sim, "csr-a")
    pair = short_tmp / "pair.pem"
    pair.write_bytes(join_pair(cert.public_bytes(Encoding.PEM), key))
    sim.stats.reset()
    async with session(sim, pair_file=pair) as http, http.get("/api/v1/namespaces") as resp:
        assert resp.status == 200
    # A certificate comes first: the token sent with it is not who asks.
    async with (
        session(sim, pair_file=pair, token=sim.token) as http,
        http.get("/api/v1/namespaces/default") as resp,
    ):
        assert resp.status == 200
    users = [r.user for r in sim.stats.requests()]
    assert users == ["system:multus:node-a", "system:multus:node-a"]
    # Nothing at all over TLS: 401, as before.
    async with session(sim) as http, http.get("/api/v1/namespaces") as resp:
        assert resp.status == 401


async def test_a_certificate_from_another_ca_is_refused(sim: KubeSim, short_tmp: Path) -> None:
    async with KubeSim(tls_enabled=True) as other:
        assert other.tls is not None
        authority = Authority.load(other.tls.ca_file, other.tls.ca_key_file)
    key, request = new_request(SUBJECT)
    foreign = sign_request(authority, request, ["client auth"], ttl=600, backdate=0)
    pair = short_tmp / "foreign.pem"
    pair.write_bytes(join_pair(foreign, key))
    async with session(sim, pair_file=pair) as http:
        with pytest.raises(aiohttp.ClientError):
            async with http.get("/api/v1/namespaces") as resp:
                await resp.read()


async def test_the_requests_in_protobuf(sim: KubeSim) -> None:
    """kubectl 1.32 approves in protobuf: the message reads back as the stored JSON."""
    async with session(sim, token=sim.token) as http:
        await create(http, csr_body()[0])
        await approve(http, "csr-a")
    await issued(sim, "csr-a")
    csr = stored(sim, "csr-a")
    table = kindproto.MESSAGES[("certificates.k8s.io/v1", "CertificateSigningRequest")]
    api_version, kind = "certificates.k8s.io/v1", "CertificateSigningRequest"
    wire = protoencode.wrap(kind, podproto.message(csr, table), api_version)
    decoded = protodecode.decode_object(wire, api_version, kind)
    assert decoded["spec"] == csr["spec"] and decoded["status"] == csr["status"]
    async with session(sim, token=sim.token) as http:
        headers = {"Accept": f"{PROTOBUF}, application/json"}
        async with http.get(f"{CSRS}/csr-a", headers=headers) as resp:
            assert resp.content_type == PROTOBUF
            got = protodecode.decode_object(await resp.read(), api_version, kind)
    assert got["status"]["certificate"] == csr["status"]["certificate"]


async def test_kubectl_certificate_approve(
    sim: KubeSim, short_tmp: Path, kubectl: Kubectl, kubectl_bin: KubectlBinary
) -> None:
    kubeconfig = await sim.write_kubeconfig(short_tmp / "kubeconfig")
    async with session(sim, token=BOOT_TOKEN) as http:
        await create(http, csr_body()[0])
    rc, out, err = await kubectl(kubeconfig, "get", "csr")
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION",
                              "CONDITION"]  # fmt: skip
    assert row.split()[2:] == [CLIENT, "system:node:node-a", "10m", "Pending"]
    rc, out, err = await kubectl(kubeconfig, "certificate", "approve", "csr-a")
    assert rc == 0, err
    assert out.strip() == "certificatesigningrequest.certificates.k8s.io/csr-a approved"
    await issued(sim, "csr-a")
    rc, out, err = await kubectl(kubeconfig, "get", "csr", "csr-a")
    assert rc == 0, err
    assert out.splitlines()[1].split()[-1] == "Approved,Issued"
    (put,) = [r for r in sim.stats.requests() if r.verb == "update"]
    assert put.subresource == "approval" and put.body_type == kubectl_bin.typed_media_type


async def test_nodes(sim: KubeSim) -> None:
    sim.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}})
    sim.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-b"},
                "spec": {"unschedulable": True}})  # fmt: skip
    async with session(sim, token=sim.token) as http:
        async with http.get("/api/v1/nodes/node-a") as resp:
            assert (await resp.json())["metadata"]["name"] == "node-a"
        params = {"fieldSelector": "spec.unschedulable=false"}
        async with http.get("/api/v1/nodes", params=params) as resp:
            assert [n["metadata"]["name"] for n in (await resp.json())["items"]] == ["node-a"]
    assert CERTIFICATE_SIGNING_REQUESTS.namespaced is False
