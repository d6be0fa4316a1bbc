"""kubernetes_asyncio's ``ApiClient``, with what every request of the daemon passes through.

Every request the daemon makes, typed methods (``CoreV1Api``, ``CustomObjectsApi``),
``call_api`` and watches alike, ends in ``ApiClient.request``; :class:`LimitedApiClient`
overrides it, so nothing reaches the API server around these rules:

* a request first takes one of ``pool_size`` request slots, then a token from the one token
  bucket (QPS 50, burst 50 like upstream's client-go settings), in its
  :class:`~multusd.k8s.ratelimit.Priority` class (Events are ``BACKGROUND``, everything else
  ``REQUEST``). A token is never spent queueing for a connection: a slow server that recovers
  would otherwise receive the whole backlog at once, far above ``burst + qps`` per second
  (measured: 219 in one second). Watches take a token but no slot (one per reflector, open
  for minutes);
* pod reads (get, list, watch) ask for Kubernetes protobuf first and JSON second while
  ``protobuf_pods`` holds (client-go's order); every other request is JSON;
* an answer of 401 re-reads the token file and, when it held a new token, the request is sent
  once more with it (client-go's rule after a rotation: ``multusd.k8s.apiconfig``);
* ordinary requests have a connect and a total timeout (the caller's ``_request_timeout``, else
  ``request_timeout``); watches a connect timeout and a socket-read timeout (silence longer
  than ``watch_read_timeout`` ends the stream) but no total;
* a failure is a ``multusd.k8s.errors`` value built from the server's ``Status`` (in whichever
  encoding it came), or ``TransportError``; what the answers say about the server's health is
  kept in ``contacts`` (``multusd.k8s.health``), the cheap view ``/readyz`` reports.

What it returns: for a watch, aiohttp's streaming response (``multusd.k8s.watchstream`` reads
it); for anything else kubernetes_asyncio's ``RESTResponse`` with the body already read inside
the slot. Callers pass ``_preload_content=False`` and decode the body themselves (pods may be
protobuf; the generated models cost ~0.6 ms a pod and are never built).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.rest import RESTResponse

from multusd import __version__
from multusd.k8s import kproto
from multusd.k8s.apiconfig import TokenFile
from multusd.k8s.errors import (
    ApiError,
    TransportError,
    error_from_response,
    error_from_status,
    parse_retry_after,
)
from multusd.k8s.health import Contacts, is_failure
from multusd.k8s.ratelimit import Priority, TokenBucket
from multusd.protobuf import MEDIA_TYPE

log = logging.getLogger(__name__)

TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
AUTH_SETTINGS = ["BearerToken"]
"""kubernetes_asyncio's auth setting for ``call_api``: the bearer token, when one is set (the
typed methods name it themselves)."""
# client-go's order: protobuf preferred, JSON for whatever has no protobuf form.
PROTOBUF_ACCEPT = f"{MEDIA_TYPE}, application/json"
WATCH_CONNECTIONS = 4
"""Connections beyond the request slots, for the watches (one per reflector): the client's
connection limit is ``pool_size + WATCH_CONNECTIONS``, idle ones included (aiohttp closes an
idle one after 15 s), so a burst can never leave more than that many TLS buffers behind."""
_WAIT_LOG_THRESHOLD = 0.010  # bucket waits above this are logged at debug


def resource_of(method: str, path: str, params: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(RBAC verb, resource[/subresource]) of an API path, for statistics and logs:
    ``GET /api/v1/namespaces/ns/pods/p`` is ``("get", "pods")``."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    rest: list[str] = []
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = rest[0] if rest else path
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    named = len(rest) >= 2
    method = method.upper()
    if method == "GET":
        if params is not None and params.get("watch") in ("true", "1", "True"):
            verb = "watch"
        else:
            verb = "get" if named else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, method.lower()
        )
    return verb, resource


def media_type(headers: Mapping[str, str]) -> str:
    """A response's media type, parameters dropped."""
    return headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


def error_of(status: int, payload: bytes, headers: Mapping[str, str]) -> ApiError:
    """The error of a failed response, its Status read in whichever encoding it came."""
    if media_type(headers) == MEDIA_TYPE:
        try:
            status_obj = kproto.decode_status(payload)
        except ValueError:
            pass
        else:
            err = error_from_status(status_obj, http_status=status)
            retry_after = parse_retry_after(headers.get("Retry-After"))
            if retry_after is not None:
                err.retry_after = retry_after
            return err
    return error_from_response(status, payload, headers)


def transport_error(method: str, key: tuple[str, str], exc: BaseException) -> TransportError:
    what = type(exc).__name__
    detail = str(exc) or what
    if isinstance(exc, TimeoutError):
        detail = f"timed out ({what})"
    return TransportError(f"{key[0]} {key[1]} ({method}) failed: {detail}")


class LimitedApiClient(ApiClient):
    """``ApiClient`` whose every request passes the slots, the bucket and the token rules."""

    def __init__(
        self,
        configuration: Configuration,
        *,
        token: TokenFile | None,
        qps: float,
        burst: int,
        pool_size: int,
        connect_timeout: float,
        request_timeout: float,
        watch_read_timeout: float,
        user_agent: str,
        protobuf_pods: bool,
    ) -> None:
        configuration.connection_pool_maxsize = pool_size + WATCH_CONNECTIONS
        super().__init__(configuration)
        self.user_agent = user_agent if "/" in user_agent else f"{user_agent}/{__version__}"
        self.token = token
        self.bucket = TokenBucket(qps, burst)
        self.on_bucket_wait: Callable[[float], None] | None = None
        """Told every wait for a bucket token (the daemon's metrics histogram)."""
        self.requests: Counter[tuple[str, str]] = Counter()
        self.statuses: Counter[int] = Counter()
        self.watches_open = 0
        self.contacts = Contacts()
        """What the server's answers say about its health, per resource (``/readyz``)."""
        self.protobuf_pods = protobuf_pods
        self._slots = asyncio.Semaphore(pool_size)
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, connect=connect_timeout)
        self._watch_timeout = aiohttp.ClientTimeout(
            total=None, connect=connect_timeout, sock_read=watch_read_timeout
        )

    async def request(  # noqa: PLR0917 - ApiClient.request's signature
        self,
        method: str,
        url: str,
        query_params: Any = None,
        headers: dict[str, str] | None = None,
        post_params: Any = None,
        body: Any = None,
        _preload_content: bool = True,
        _request_timeout: float | tuple[float] | aiohttp.ClientTimeout | None = None,
    ) -> Any:
        query = {str(k): str(v) for k, v in (query_params or ())}
        key = resource_of(method, urlsplit(url).path, query)
        headers = dict(headers or {})
        headers.setdefault("Accept", "application/json")  # aiohttp's default is */*
        if self.protobuf_pods and key[1] == "pods" and key[0] in ("get", "list", "watch"):
            headers["Accept"] = PROTOBUF_ACCEPT
        watch = key[0] == "watch"
        if watch:
            timeout = self._watch_timeout
        elif isinstance(_request_timeout, int | float):
            timeout = aiohttp.ClientTimeout(
                total=max(0.001, _request_timeout), connect=self._timeout.connect
            )
        elif isinstance(_request_timeout, aiohttp.ClientTimeout):
            timeout = _request_timeout
        else:
            timeout = self._timeout
        send = _Send(method, url, key, query_params, headers, post_params, body, timeout)
        if watch:
            return await self._attempts(send)
        async with self._slots:
            response = await self._attempts(send)
            try:
                data = await response.read()
            except TRANSPORT_ERRORS as exc:
                raise self._lost(send, exc) from exc
            finally:
                response.release()
            return RESTResponse(response, data)

    async def _attempts(self, send: _Send) -> aiohttp.ClientResponse:
        """Send until answered: twice when a 401 brought a new token, else once."""
        for attempt in (0, 1):
            response = await self._send(send)
            if response.status == 401 and attempt == 0 and await self._new_token(send):
                self.statuses[401] += 1
                response.release()
                continue
            if response.status >= 400:
                self.statuses[response.status] += 1
                with contextlib.closing(response):
                    try:
                        payload = await response.read()
                    except TRANSPORT_ERRORS:
                        payload = b""
                err = error_of(response.status, payload, response.headers)
                self.note_failure(send.key, err)
                raise err
            self.statuses[response.status] += 1
            if send.key[0] in ("list", "watch"):
                self.contacts.succeeded(send.key[1])
            else:
                self.contacts.answered()
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, send: _Send) -> aiohttp.ClientResponse:
        """One attempt: a token, then the request."""
        self.requests[send.key] += 1
        priority = Priority.BACKGROUND if send.key[1] == "events" else Priority.REQUEST
        waited = await self.bucket.acquire(priority)
        if self.on_bucket_wait is not None:
            self.on_bucket_wait(waited)
        if waited > _WAIT_LOG_THRESHOLD:
            log.debug("waited %.3f s for the API rate limit: %s %s", waited, *send.key)
        try:
            response: aiohttp.ClientResponse = await self.rest_client.request(
                send.method,
                send.url,
                query_params=send.query,
                headers=send.headers,
                post_params=send.post_params,
                body=send.body,
                _preload_content=False,
                _request_timeout=send.timeout,
            )
        except TRANSPORT_ERRORS as exc:
            raise self._lost(send, exc) from exc
        return response

    async def _new_token(self, send: _Send) -> bool:
        """After a 401: whether there is a token other than the one ``send`` carried (read
        from the file now, or by a request refused at the same time); ``send`` then carries
        it."""
        if self.token is None:
            return False
        await self.token.reload()
        current = self.configuration.api_key.get("BearerToken")
        if not current or current == send.headers.get("authorization"):
            return False
        send.headers["authorization"] = current
        return True

    def _lost(self, send: _Send, exc: BaseException) -> TransportError:
        self.statuses[0] += 1
        lost = transport_error(send.method, send.key, exc)
        self.note_failure(send.key, lost)
        return lost

    def note_failure(self, key: tuple[str, str], err: ApiError) -> None:
        """Tell ``contacts`` about a failed answer (or its absence), or a healthy refusal."""
        collection = key[0] in ("list", "watch")
        if is_failure(err.status, own_list_or_watch=collection):
            self.contacts.failed(key[1] if collection else None, f"{type(err).__name__}: {err}")
        else:
            self.contacts.answered()

    def give_up_protobuf(self, what: str, exc: ValueError) -> None:
        """Read pods as JSON from now on: this server sent protobuf our decoder cannot read."""
        if self.protobuf_pods:
            self.protobuf_pods = False
            log.warning(
                "cannot decode protobuf from the API server (%s: %s); reading pods as JSON",
                what,
                exc,
            )


@dataclass(slots=True)
class _Send:
    """One request as every attempt of it is sent (the headers change after a 401)."""

    method: str
    url: str
    key: tuple[str, str]
    query: Any
    headers: dict[str, str]
    post_params: Any
    body: Any
    timeout: aiohttp.ClientTimeout
