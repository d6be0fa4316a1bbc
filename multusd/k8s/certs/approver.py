"""The cert approver: approves the CertificateSigningRequests of per-node certificates.

Upstream ships ``cmd/cert-approver`` in its image for clusters that enable
``perNodeCertificate``: nothing else approves a ``kubernetes.io/kube-apiserver-client`` request
(the kube-controller-manager only approves the kubelet's own). This is that controller, check for
check and text for text:

* **which requests**: those whose request's common name starts with ``system:multus`` and whose
  signer is ``kubernetes.io/kube-apiserver-client`` (``filterCSR``), seen for the first time:
  upstream's informer has an add handler only, so a request is looked at when it appears (or
  when the approver starts and lists it), never again on later changes;
* **approved** when it is not signed, approved or denied yet and everything holds, in this
  order: the requester (``spec.username``) is ``system:node:<node>`` (the kubelet's identity,
  the bootstrap credentials) or ``system:multus:<node>`` (a renewal with the node's own
  certificate); ``<node>`` is a DNS subdomain; the usages are exactly digital signature and
  client auth; the requester's groups are among ``system:nodes``, ``system:multus``,
  ``system:authenticated``; the common name is ``system:multus:<node>`` and the organizations
  exactly ``[system:multus]``; ``expirationSeconds`` is set and at most a year. Whether a Node
  of that name exists is not checked (upstream does not);
* **approving** is an update of the ``approval`` subresource with the condition ``Approved``,
  reason ``AutoApproved``, message ``Auto-approved CSR "<name>"``, and an event ``CSRApproved``;
* **anything else is left alone**, with a ``CSRDenied`` warning event that says why. Upstream
  means to deny it, but writes the condition through a plain update of the object, which the
  API server ignores for conditions (only the ``approval`` subresource changes them): the
  request stays pending there too. We send no such update: it changes nothing;
* **errors** (an unparsable request or requester, an API failure) are retried up to five
  times, 5 ms apart and doubling (the work queue's default rate limiter), then dropped.

Where upstream reads the in-cluster config only, this one also takes a kubeconfig
(``--kubeconfig``, ``$KUBECONFIG``), for running it outside a pod.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from multusd.k8s.certs.csr import CSR_PATH, KUBE_APISERVER_CLIENT
from multusd.k8s.certs.keys import CertificateError, parse_request_subject
from multusd.k8s.client import KubeClient
from multusd.k8s.errors import ApiError
from multusd.k8s.events import object_event
from multusd.k8s.reflector.loop import Reflector
from multusd.k8s.store import ADDED, MODIFIED, Store, key_of

__all__ = ["CertApprover", "Decision", "decide", "wanted"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

CONTROLLER_NAME = "csr-approver"
COMPONENT = "cert-approver"
NAME_PREFIX = "system:multus"
ORGANIZATION = ("system:multus",)
GROUPS = frozenset({"system:nodes", "system:multus", "system:authenticated"})
USER_PREFIXES = frozenset({"system:node", NAME_PREFIX})
USAGES = frozenset({"digital signature", "client auth"})
MAX_DURATION = 365 * 24 * 3600
"""Upstream's ``maxDuration``, in seconds: a year."""
MAX_RETRIES = 5
RETRY_BASE = 0.005
"""The work queue's per-item back-off: 5 ms, doubling with each retry."""
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")


class ApproverError(Exception):
    """A request the approver cannot read; retried, then dropped (upstream's errors)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one request: ``approve``, or leave it with ``message`` saying why."""

    approve: bool
    node: str
    message: str


def _go_list(items: Iterable[str]) -> str:
    """Go's ``%v`` of a ``[]string``."""
    return "[" + " ".join(items) + "]"


def _request_pem(csr: Obj) -> bytes | None:
    """``spec.request`` decoded, when it holds a PEM ``CERTIFICATE REQUEST`` block (Go's
    ``pem.Decode`` finding one)."""
    try:
        data = base64.b64decode(str((csr.get("spec") or {}).get("request") or ""), validate=True)
    except ValueError:
        return None
    if b"-----BEGIN " not in data:
        return None
    return data


def _subject(csr: Obj) -> tuple[str, tuple[str, ...]]:
    data = _request_pem(csr)
    if data is None:
        raise ApproverError(
            "failed to PEM-parse the CSR block in .spec.request: no CSRs were found"
        )
    try:
        subject = parse_request_subject(data)
    except CertificateError as exc:
        raise ApproverError(f"failed to parse the CSR bytes: {exc}") from exc
    return subject.common_name, subject.organizations


def wanted(csr: Obj) -> bool:
    """Upstream's ``filterCSR``: a request whose common name starts with ``system:multus``,
    for the API server client signer (one that cannot be parsed is logged and not wanted)."""
    name = (csr.get("metadata") or {}).get("name", "")
    try:
        common_name, _ = _subject(csr)
    except ApproverError as exc:
        log.error("%s of %s", exc, name)
        return False
    signer = (csr.get("spec") or {}).get("signerName")
    return common_name.startswith(NAME_PREFIX) and signer == KUBE_APISERVER_CLIENT


def _settled(csr: Obj) -> str:
    """Why there is nothing to do ("" when there is something)."""
    status = csr.get("status") or {}
    name = (csr.get("metadata") or {}).get("name", "")
    if status.get("certificate"):
        return f"CSR {name} is already signed"
    for condition in status.get("conditions") or ():
        if condition.get("type") in ("Approved", "Denied"):
            return f"CSR {name} is already approved/denied"
    return ""


def _subdomain_errors(value: str) -> list[str]:
    """apimachinery's ``IsDNS1123Subdomain``: its messages, in its order."""
    errors = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character (e.g. "
            "'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    return errors


def decide(csr: Obj) -> Decision | None:
    """Upstream's ``processItem``: ``None`` when the request is already settled, else the
    decision; :class:`ApproverError` when it cannot be read (retried)."""
    if _settled(csr):
        return None
    common_name, organizations = _subject(csr)
    name = str((csr.get("metadata") or {}).get("name", ""))
    spec = csr.get("spec") or {}
    username = str(spec.get("username") or "")
    cut = username.rfind(":")
    if cut == -1 or cut == len(username) - 1:
        raise ApproverError(f"failed to parse the username: {username}")
    prefix, node = username[:cut], username[cut + 1 :]

    def leave(message: str) -> Decision:
        return Decision(False, node, message)

    if prefix not in USER_PREFIXES:
        return leave(f'CSR "{name}" was created by an unexpected user: "{username}"')
    if errors := _subdomain_errors(node):
        return leave(
            f'extracted node name "{node}" is not a valid DNS subdomain {_go_list(errors)}'
        )
    usages = set(spec.get("usages") or ())
    if usages != USAGES:
        return leave(f'CSR "{name}" was created with unexpected usages: {_go_list(sorted(usages))}')
    groups = [str(g) for g in spec.get("groups") or ()]
    if not set(groups) <= GROUPS:
        return leave(
            f'CSR "{name}" was created by a user with unexpected groups: {_go_list(groups)}'
        )
    expected = f"{NAME_PREFIX}:{node}"
    if common_name != expected:
        return leave(
            f'expected the CSR\'s commonName to be "{expected}", but it is "{common_name}"'
        )
    if organizations != ORGANIZATION:
        return leave(
            f"expected the CSR's organization to be {_go_list(ORGANIZATION)}, but it is "
            f"{_go_list(organizations)}"
        )
    seconds = spec.get("expirationSeconds")
    if seconds is None:
        return leave(f'CSR "{name}" was created without specyfying the expirationSeconds')
    if int(seconds) > MAX_DURATION:
        return leave(f'CSR "{name}" was created with invalid expirationSeconds value: {seconds}')
    return Decision(True, node, f'Auto-approved CSR "{name}"')


def approval_body(csr: Obj) -> Obj:
    """The request with upstream's approval condition appended, for the ``approval`` update."""
    name = (csr.get("metadata") or {}).get("name", "")
    status = dict(csr.get("status") or {})
    status["conditions"] = [
        *(status.get("conditions") or ()),
        {
            "type": "Approved",
            "status": "True",
            "reason": "AutoApproved",
            "message": f'Auto-approved CSR "{name}"',
        },
    ]
    return {
        **csr,
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "status": status,
    }


def csr_event(csr: Obj, event_type: str, reason: str, message: str) -> Obj:
    """An Event about ``csr`` as client-go's recorder makes one for a cluster-scoped object
    (in the ``default`` namespace), from the component ``cert-approver``."""
    kind = ("certificates.k8s.io/v1", "CertificateSigningRequest")
    return object_event(csr, kind, event_type, reason, message, component=COMPONENT)


class _Arrivals(Store):
    """The reflector's store, telling ``on_add`` of each request it holds for the first time
    (an informer's add handler: a relist's unknown objects count, updates do not)."""

    def __init__(self, on_add: Callable[[Obj], None]) -> None:
        super().__init__()
        self.on_add = on_add

    def replace(self, objects: Iterable[Obj], resource_version: str) -> None:
        items = list(objects)
        new = [o for o in items if self._is_new(o)]
        super().replace(items, resource_version)
        for obj in new:
            self.on_add(obj)

    def apply(self, event_type: str, obj: Obj) -> None:
        new = event_type in (ADDED, MODIFIED) and self._is_new(obj)
        super().apply(event_type, obj)
        if new:
            self.on_add(obj)

    def _is_new(self, obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        return self.get(str(meta.get("namespace") or ""), str(meta.get("name") or "")) is None


def _keep(obj: Obj) -> Obj:
    return obj


class CertApprover:
    """The controller: a reflector over CertificateSigningRequests and one worker."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.store = _Arrivals(self._added)
        self.reflector = Reflector(
            client, CSR_PATH, self.store, trim=_keep, name="certificatesigningrequests"
        )
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._retries: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.approved = 0
        self.left = 0
        self.dropped = 0

    def _added(self, obj: Obj) -> None:
        if wanted(obj):
            self._enqueue(key_of(obj))

    def _enqueue(self, key: str) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self.queue.put_nowait(key)

    async def run(self) -> None:
        """Until cancelled: list and watch, then approve what arrives."""
        log.info("Starting cert approver")
        watching = asyncio.create_task(self.reflector.run(), name="reflector-csr")
        try:
            synced = asyncio.ensure_future(self.store.synced.wait())
            try:
                await asyncio.wait({synced, watching}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                synced.cancel()
                await asyncio.gather(synced, return_exceptions=True)
            if watching.done():
                watching.result()  # the reflector never returns: this raises its error
            log.info("cert approver synced and ready")
            while True:
                key = await self.queue.get()
                self._queued.discard(key)
                await self.process(key)
        finally:
            for timer in self._timers.values():
                timer.cancel()
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)

    async def process(self, key: str) -> None:
        """One queued request, its errors retried as the work queue retries them."""
        try:
            await self._sync(key)
        except (ApproverError, ApiError) as exc:
            tries = self._retries.get(key, 0)
            if tries < MAX_RETRIES:
                self._retries[key] = tries + 1
                log.info("Error syncing csr %s: %s", key, exc)
                delay = RETRY_BASE * 2**tries
                self._timers[key] = asyncio.get_running_loop().call_later(delay, self._retry, key)
                return
            self._retries.pop(key, None)
            self.dropped += 1
            log.info('Dropping csr "%s" out of the queue: %s', key, exc)
            return
        self._retries.pop(key, None)

    def _retry(self, key: str) -> None:
        self._timers.pop(key, None)
        self._enqueue(key)

    async def _sync(self, key: str) -> None:
        csr = self.store.get("", key)
        if csr is None:
            return  # deleted since
        started = time.monotonic()
        node = "unknown"
        try:
            decision = decide(csr)
            if decision is None:
                log.debug("%s", _settled(csr))
                return
            node = decision.node
            name = str(csr["metadata"]["name"])
            if decision.approve:
                await self.client.put(f"{CSR_PATH}/{name}/approval", approval_body(csr))
                self.approved += 1
                message = f'CSR "{name}" has been approved by {CONTROLLER_NAME}'
                await self._event(csr, "Normal", "CSRApproved", message)
            else:
                self.left += 1
                log.warning("leaving CSR %s alone: %s", name, decision.message)
                await self._event(
                    csr, "Warning", "CSRDenied",
                    f'The CSR "{name}" has been denied by {CONTROLLER_NAME}: {decision.message}',
                )  # fmt: skip
        finally:
            log.info("Finished syncing CSR %s for %s node in %.3fs", key, node,
                     time.monotonic() - started)  # fmt: skip

    async def _event(self, csr: Obj, event_type: str, reason: str, message: str) -> None:
        """Post an event; advisory, so a failure is logged and the decision stands."""
        try:
            await self.client.create_event("default", csr_event(csr, event_type, reason, message))
        except ApiError as exc:
            log.warning("cannot post the %s event: %s", reason, exc)
