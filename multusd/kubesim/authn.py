"""Who sent a request: bearer tokens and TLS client certificates, as kube-apiserver's
authenticators tell.

kube-apiserver asks its authenticators in turn and takes the first that knows the request; the
x509 one comes before the token ones. So here:

* a **client certificate** signed by the emulator's CA (TLS mode: the server asks for one,
  ``multusd.kubesim.tls``; the handshake has already verified it) is the user of its common
  name, in the groups of its organizations (the x509 authenticator's ``CommonNameUserConversion``),
  whatever token came with it;
* else a **bearer token**: ``Settings.token`` is the emulator's admin (``kubesim-admin``, group
  ``system:masters``), and ``Settings.users`` holds more tokens with the user and groups they
  stand for (kube-apiserver's ``--token-auth-file``), for tests that need a requester of a given
  name: a kubelet's ``system:node:<node>`` asking for a per-node certificate;
* over plain http a request without credentials is let in (the old insecure port, as before);
  with ``Settings.token`` unset every request is (``system:anonymous``).

Every authenticated user is also in ``system:authenticated``, as the apiserver adds it. The user
goes into the request log (``RequestRecord.user``) and, for the handlers, into a context variable
(:func:`current`): a CertificateSigningRequest records its requester. One difference from the
apiserver: Python's TLS layer verifies a client certificate during the handshake, so an expired
or foreign one ends the connection where kube-apiserver would answer 401.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from multusd.kubesim.state import State

__all__ = ["ADMIN", "Identity", "RequestContext", "acting", "authenticate", "current"]

AUTHENTICATED = "system:authenticated"
MIN_CSR_EXPIRATION = 600


@dataclass(frozen=True, slots=True)
class Identity:
    """A user as the apiserver's ``user.Info`` has it."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""


ADMIN = Identity("kubesim-admin", ("system:masters", AUTHENTICATED))
"""The holder of ``Settings.token``, and the in-process handle's user."""
ANONYMOUS = Identity("system:anonymous", ("system:unauthenticated",))
UNSECURED = Identity("system:unsecured", ("system:masters", AUTHENTICATED))
"""The plain-http user without credentials (what the old insecure port was)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler may need to know of the request beyond its body."""

    identity: Identity
    csr_min_expiration_seconds: int = MIN_CSR_EXPIRATION


_CURRENT: ContextVar[RequestContext | None] = ContextVar("kubesim_request", default=None)


def current() -> RequestContext:
    """The request being served (outside a request: the admin, with the apiserver's limits)."""
    return _CURRENT.get() or RequestContext(ADMIN)


@contextlib.contextmanager
def acting(context: RequestContext) -> Iterator[None]:
    """Serve what runs in the block as ``context`` (the middleware, around each request)."""
    token = _CURRENT.set(context)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def _with_authenticated(name: str, groups: tuple[str, ...], uid: str = "") -> Identity:
    if AUTHENTICATED not in groups:
        groups = (*groups, AUTHENTICATED)
    return Identity(name, groups, uid)


def certificate_identity(peercert: dict[str, Any] | None) -> Identity | None:
    """The user of a verified client certificate (``ssl.SSLSocket.getpeercert()``'s dict):
    common name and organizations; ``None`` without one or without a common name."""
    if not peercert:
        return None
    names: list[str] = []
    organizations: list[str] = []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                names.append(value)
            elif key == "organizationName":
                organizations.append(value)
    if not names or not names[0]:
        return None
    return _with_authenticated(names[0], tuple(organizations))


def token_identity(state: State, token: str) -> Identity | None:
    settings = state.settings
    if settings.token is not None and hmac.compare_digest(token, settings.token):
        return ADMIN
    for known, name, groups in settings.users:
        if hmac.compare_digest(token, known):
            return _with_authenticated(name, tuple(groups))
    return None


def authenticate(request: web.Request, state: State, *, public: bool = False) -> Identity | None:
    """The request's user, or ``None`` for a 401."""
    transport = request.transport
    peercert = transport.get_extra_info("peercert") if transport is not None else None
    identity = certificate_identity(peercert)
    if identity is not None:
        return identity
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer":
            identity = token_identity(state, given.strip())
            if identity is not None:
                return identity
    if state.settings.token is None or public:
        return ANONYMOUS
    if header is None and not request.secure:
        # Like the old insecure port: over plain http there is no authentication, because
        # client-go never sends a bearer token over http (measured with kubectl 1.32).
        return UNSECURED
    return None


def add_token(state: State, token: str, name: str, groups: tuple[str, ...] = ()) -> None:
    """Accept ``token`` from now on as ``name`` in ``groups`` (plus ``system:authenticated``)."""
    users = tuple(u for u in state.settings.users if u[0] != token)
    state.settings = replace(state.settings, users=(*users, (token, name, groups)))
