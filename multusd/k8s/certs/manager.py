"""Keeping a client certificate current: client-go's certificate manager, as a task.

Upstream's per-node certificate is kept by ``certificate.NewManager`` (``k8s.io/client-go/util/
certificate``), and so is ours, rule for rule:

* **when**: at a deadline drawn once per certificate, 70-90 % of the way from its ``NotBefore``
  to its ``NotAfter`` (``jitteryDuration``: ``wait.Jitter(total, 0.2) - 0.3 * total``), so that
  nodes started together do not renew together; at once when there is no certificate, when the
  one on disk has expired, or when it does not match the template (another common name, an
  organization missing);
* **how**: a new P-256 key and request every attempt, a CertificateSigningRequest through the
  client :attr:`CertificateManager.client_for` gives for the current pair (upstream: the node's
  own certificate while it is valid, the bootstrap credentials otherwise), a wait of up to
  15 minutes for it to be issued, then the pair written to the store and handed on
  (:attr:`on_rotated`: the live clients swap to it; the first pair has no clients yet);
* **after a failure**: attempts 2, 4, 8 and 16 seconds apart (each up to 10 % longer), then
  every 32 seconds until one succeeds (``wait.ExponentialBackoff`` then ``PollInfinite``).

What differs: times are wall-clock seconds (``datetime`` in UTC), which is what certificates
count in; and the manager reports a current pair only while it is valid, where client-go's
store (read by upstream's start-up wait) hands out an expired one too.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from multusd.errors import StartupError
from multusd.k8s.certs import csr
from multusd.k8s.certs.keys import CertificateError, IssuedPair, RequestSubject, new_request
from multusd.k8s.certs.store import CertificateStore, NoCertificateError
from multusd.k8s.client import KubeClient
from multusd.k8s.errors import ApiError

__all__ = ["CertificateManager", "Template", "rotation_deadline"]

log = logging.getLogger(__name__)

CERTIFICATE_WAIT = 15 * 60.0
"""client-go's ``certificateWaitTimeout``: how long one request may wait to be issued."""
BACKOFF = (2.0, 4.0, 8.0, 16.0)
"""Pauses between the first five attempts after a failure (``wait.Backoff{2s, x2, 5 steps}``)."""
BACKOFF_JITTER = 0.1
POLL = 32.0
"""Then one attempt every this many seconds, until one succeeds (``wait.PollInfinite``)."""

ClientFor = Callable[[IssuedPair | None], AbstractAsyncContextManager[KubeClient]]


@dataclass(frozen=True, slots=True)
class Template:
    """What every request asks for (upstream's ``certificate.Config``)."""

    subject: RequestSubject
    signer: str
    usages: tuple[str, ...]
    lifetime_ns: int | None

    def satisfied_by(self, pair: IssuedPair) -> bool:
        """client-go's ``certSatisfiesTemplateLocked``: the same common name, and every
        organization asked for (extra ones are fine)."""
        return pair.subject.common_name == self.subject.common_name and set(
            self.subject.organizations
        ) <= set(pair.subject.organizations)


def rotation_deadline(pair: IssuedPair, rng: random.Random) -> datetime.datetime:
    """70-90 % of the pair's lifetime after its ``NotBefore``: ``wait.Jitter(total, 0.2)`` is
    ``total * (1 + 0.2 r)``, less ``0.3 * total``."""
    total = pair.lifetime
    jittered = total + rng.random() * 0.2 * total - 0.3 * total
    return pair.not_before + datetime.timedelta(seconds=jittered)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CertificateManager:
    """The current pair, and the task that renews it (:meth:`run`)."""

    def __init__(
        self,
        store: CertificateStore,
        template: Template,
        *,
        client_for: ClientFor,
        on_rotated: Callable[[IssuedPair], Awaitable[None]],
        rng: random.Random | None = None,
        now: Callable[[], datetime.datetime] = _now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wait_timeout: float = CERTIFICATE_WAIT,
    ) -> None:
        self.store = store
        self.template = template
        self.client_for = client_for
        self.on_rotated = on_rotated
        self.rng = rng or random.Random()
        self.now = now
        self.sleep = sleep
        self.wait_timeout = wait_timeout
        self.pair: IssuedPair | None = None
        self.issued = asyncio.Event()
        """Set once there is a valid certificate (what start-up waits for)."""
        self.store_error = ""
        """Why the store had no usable pair at the last look ("" when it had one)."""
        self.rotations = 0
        self.failures = 0
        self._force = False

    # --- the current pair ----------------------------------------------------------------------

    async def load(self) -> None:
        """Take the store's pair if it is still valid (upstream's
        ``getCurrentCertificateOrBootstrap``); otherwise the first rotation is due at once."""
        await self.store.recover()
        try:
            pair = await self.store.current()
        except (NoCertificateError, CertificateError) as exc:
            self.store_error = str(exc)
            self._force = True
            return
        if pair.expired(self.now()):
            self.store_error = f"the certificate in {self.store.current_path} expired at " + (
                pair.not_after.isoformat()
            )
            log.info("%s: requesting a new one", self.store_error)
            self._force = True
            return
        self.store_error = ""
        self.pair = pair
        self.issued.set()
        log.info(
            "using the client certificate in %s (%s, valid until %s)",
            self.store.current_path, pair.subject.common_name, pair.not_after.isoformat(),
        )  # fmt: skip

    def current(self) -> IssuedPair | None:
        """The pair while it is valid (client-go's ``Current``: ``nil`` once expired)."""
        pair = self.pair
        if pair is None or pair.expired(self.now()):
            return None
        return pair

    def next_deadline(self) -> datetime.datetime:
        """When the next rotation is due (client-go's ``nextRotationDeadline``)."""
        if self._force:
            self._force = False
            return self.now()
        pair = self.pair
        if pair is None or not self.template.satisfied_by(pair):
            return self.now()
        return rotation_deadline(pair, self.rng)

    # --- rotating ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Rotate at each deadline, forever (the caller cancels): the manager's task."""
        while True:
            deadline = self.next_deadline()
            delay = (deadline - self.now()).total_seconds()
            if delay > 0:
                log.info("certificate rotation in %.0fs (at %s)", delay, deadline.isoformat())
                await self.sleep(delay)
            await self._until_rotated()

    async def _until_rotated(self) -> None:
        for pause in BACKOFF:
            if await self.rotate():
                return
            await self.sleep(pause * (1 + self.rng.random() * BACKOFF_JITTER))
        if await self.rotate():
            return
        log.error("reached backoff limit, still unable to rotate certs: retrying every %gs", POLL)
        while True:
            await self.sleep(POLL)
            if await self.rotate():
                return

    async def rotate(self) -> bool:
        """One attempt: a new key, a request, the wait, the store, the hand-over. ``False``
        (and a logged reason) when it did not end with a new current pair."""
        log.info("rotating certificates")
        try:
            key_pem, request_pem = await asyncio.to_thread(new_request, self.template.subject)
        except (ValueError, OSError) as exc:
            return self._failed(f"unable to generate a certificate signing request: {exc}")
        expiration = None
        if self.template.lifetime_ns is not None:
            expiration = csr.expiration_seconds(self.template.lifetime_ns)
        try:
            async with self.client_for(self.current()) as client:
                request = await csr.request_certificate(
                    client, request_pem, signer=self.template.signer,
                    usages=self.template.usages, expiration=expiration,
                )  # fmt: skip
                log.info("certificate signing request %s sent, waiting for it", request.name)
                try:
                    async with asyncio.timeout(self.wait_timeout):
                        certificate = await csr.wait_for_certificate(client, request)
                except (ApiError, csr.RequestRefused, TimeoutError) as exc:
                    what = (
                        "timed out waiting for the condition"
                        if isinstance(exc, TimeoutError)
                        else str(exc)
                    )
                    return self._failed(f"certificate request was not signed: {what}")
        except ApiError as exc:
            return self._failed(
                f"failed while requesting a signed certificate from the control plane: {exc}"
            )
        except (OSError, ValueError, StartupError) as exc:
            return self._failed(f"unable to load a client to request certificates: {exc}")
        try:
            pair = await self.store.update(certificate, key_pem)
        except (CertificateError, OSError) as exc:
            return self._failed(f"unable to store the new cert/key pair: {exc}")
        self.pair = pair
        self.store_error = ""
        self.rotations += 1
        log.info(
            "certificate issued by %s: %s, valid until %s", request.name,
            pair.subject.common_name, pair.not_after.isoformat(),
        )  # fmt: skip
        if self.issued.is_set():  # clients that present the previous pair: hand them this one
            try:
                await self.on_rotated(pair)
            except (OSError, ValueError) as exc:
                log.error("the new certificate could not be put to use: %s", exc)
        self.issued.set()
        return True

    def _failed(self, reason: str) -> bool:
        self.failures += 1
        log.error("%s", reason)
        return False
