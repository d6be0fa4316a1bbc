"""client-go's certificate manager rules: when a certificate is renewed (70-90 % of its life,
jittered; at once when missing, expired or not the template's), how one attempt goes, and the
back-off after failures."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from multusd.k8s.certs.keys import IssuedPair, RequestSubject
from multusd.k8s.certs.manager import CertificateManager, Template, rotation_deadline
from multusd.k8s.certs.store import CertificateStore
from multusd.k8s.errors import ApiError
from tests.unit.k8s.test_certs_store import issue, pair

SUBJECT = RequestSubject("system:multus:node-a", ("system:multus",))
TEMPLATE = Template(SUBJECT, "kubernetes.io/kube-apiserver-client",
                    ("digital signature", "client auth"), 600 * 10**9)  # fmt: skip
T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def issued(
    *, lifetime: float = 1000.0, subject: RequestSubject = SUBJECT, start: datetime.datetime = T0
) -> IssuedPair:
    return IssuedPair(b"", start, start + datetime.timedelta(seconds=lifetime), subject)


class Fixed(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize(("r", "share"), [(0.0, 0.7), (0.5, 0.8), (0.999999, 0.9)])
def test_deadline_is_70_to_90_percent_of_the_lifetime(r: float, share: float) -> None:
    deadline = rotation_deadline(issued(lifetime=1000.0), Fixed(r))
    assert (deadline - T0).total_seconds() == pytest.approx(1000.0 * share, abs=0.01)


def test_deadlines_spread_over_the_whole_window() -> None:
    rng = random.Random(7)
    shares = [(rotation_deadline(issued(), rng) - T0).total_seconds() / 1000 for _ in range(2000)]
    assert 0.7 <= min(shares) < 0.71 and 0.89 < max(shares) < 0.9


def test_template_satisfied_by() -> None:
    assert TEMPLATE.satisfied_by(issued())
    extra = RequestSubject(SUBJECT.common_name, ("system:multus", "more"))
    assert TEMPLATE.satisfied_by(issued(subject=extra))  # extra organizations are fine
    assert not TEMPLATE.satisfied_by(
        issued(subject=RequestSubject("system:multus:b", ("system:multus",)))
    )
    assert not TEMPLATE.satisfied_by(issued(subject=RequestSubject(SUBJECT.common_name, ())))


def make(tmp_path: Path, **kw: Any) -> CertificateManager:
    async def rotated(pair: IssuedPair) -> None:
        pass

    kw.setdefault("on_rotated", rotated)
    kw.setdefault("client_for", None)
    return CertificateManager(CertificateStore(str(tmp_path)), TEMPLATE, **kw)


async def test_no_certificate_rotates_at_once(tmp_path: Path) -> None:
    m = make(tmp_path, now=lambda: T0)
    await m.load()
    assert m.pair is None and not m.issued.is_set()
    assert "no cert/key files read at" in m.store_error
    assert m.next_deadline() == T0


async def test_a_valid_pair_on_disk_is_used(tmp_path: Path) -> None:
    store = CertificateStore(str(tmp_path))
    certificate, key = pair()
    await store.update(certificate, key)
    m = make(tmp_path, rng=Fixed(0.5))
    await m.load()
    assert m.issued.is_set() and m.pair is not None and m.store_error == ""
    assert m.next_deadline() == rotation_deadline(m.pair, Fixed(0.5))


async def test_an_expired_pair_is_renewed_at_once(tmp_path: Path) -> None:
    store = CertificateStore(str(tmp_path))
    certificate, key = pair()
    await store.update(certificate, key)
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    m = make(tmp_path, now=lambda: later)
    await m.load()
    assert m.pair is None and not m.issued.is_set()
    assert m.next_deadline() == later


class FakeClient:
    """What the CSR calls use of a KubeClient, answering as an API server would."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome
        self.posted: list[dict[str, Any]] = []

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.outcome == "refused":
            raise ApiError("forbidden", status=403)
        self.posted.append(body)
        return {"metadata": {"name": "csr-abcde", "uid": "u1"}, "spec": body["spec"]}

    async def get(self, path: str, params: Any = None, **kw: Any) -> dict[str, Any]:
        request = base64.b64decode(self.posted[-1]["spec"]["request"])
        status: dict[str, Any] = {"conditions": [{"type": "Approved"}]}
        if self.outcome == "denied":
            status = {"conditions": [{"type": "Denied", "reason": "R", "message": "M"}]}
        else:
            status["certificate"] = base64.b64encode(issue(request)).decode()
        item = {"metadata": {"name": "csr-abcde", "uid": "u1"}, "status": status}
        return {"metadata": {"resourceVersion": "5"}, "items": [item]}


def client_for(client: FakeClient, seen: list[IssuedPair | None]):  # type: ignore[no-untyped-def]
    @contextlib.asynccontextmanager
    async def opened(current: IssuedPair | None) -> AsyncIterator[FakeClient]:
        seen.append(current)
        yield client

    return opened


async def test_one_rotation(tmp_path: Path) -> None:
    client = FakeClient("issued")
    seen: list[IssuedPair | None] = []
    handed: list[IssuedPair] = []

    async def rotated(p: IssuedPair) -> None:
        handed.append(p)

    m = make(tmp_path, client_for=client_for(client, seen), on_rotated=rotated)
    await m.load()
    assert await m.rotate()
    assert seen == [None]  # no valid pair yet: the bootstrap credentials ask
    assert m.issued.is_set() and m.pair is not None and m.pair.subject == SUBJECT
    assert handed == []  # the first pair has no client to hand it to
    spec = client.posted[0]["spec"]
    assert spec["expirationSeconds"] == 600 and spec["usages"] == [
        "digital signature",
        "client auth",
    ]
    request = x509.load_pem_x509_csr(base64.b64decode(spec["request"]))
    assert request.subject.rfc4514_string() == "CN=system:multus:node-a,O=system:multus"
    assert (await m.store.current()).not_after == m.pair.not_after
    first = m.pair
    assert await m.rotate()
    assert seen[1] == first  # renewing with the current pair
    assert handed == [m.pair] and m.pair != first and m.rotations == 2


@pytest.mark.parametrize("outcome", ["denied", "refused"])
async def test_a_failed_attempt_changes_nothing(tmp_path: Path, outcome: str) -> None:
    m = make(tmp_path, client_for=client_for(FakeClient(outcome), []))
    await m.load()
    assert not await m.rotate()
    assert m.failures == 1 and m.pair is None and not m.issued.is_set()


async def test_backoff_then_polling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    attempts = 0

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    async def rotate() -> bool:
        nonlocal attempts
        attempts += 1
        return attempts == 8

    m = make(tmp_path, rng=Fixed(0.5), sleep=sleep)
    monkeypatch.setattr(m, "rotate", rotate)
    await m._until_rotated()
    # Five attempts 2, 4, 8, 16 s apart (10 % jitter at most: here 5 %), then every 32 s.
    assert pauses == pytest.approx([2.1, 4.2, 8.4, 16.8, 32.0, 32.0, 32.0])
    assert attempts == 8


async def test_run_sleeps_until_the_deadline(tmp_path: Path) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        raise asyncio.CancelledError

    m = make(tmp_path, now=lambda: T0, rng=Fixed(0.0), sleep=sleep)
    m.pair = issued(lifetime=1000.0, start=T0 - datetime.timedelta(seconds=100))
    with pytest.raises(asyncio.CancelledError):
        await m.run()
    assert slept == [pytest.approx(600.0)]  # 70 % of 1000 s after NotBefore, 100 s ago
