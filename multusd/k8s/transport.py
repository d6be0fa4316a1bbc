"""The wire under :class:`~multusd.k8s.client.KubeClient`: one HTTP client (``k8s.http``) and
what every request passes through on its way to it.

* every request, watch starts included, first takes a token from ``bucket`` (QPS 50, burst 50
  like upstream's client-go settings), in its :class:`~multusd.k8s.ratelimit.Priority` class
  (Events are ``BACKGROUND``, everything else ``REQUEST``); the wait is counted and logged at
  debug when it matters;
* a request takes its token only once it holds one of ``pool_size`` request slots, and the
  connection pool never makes a slot-holder wait (watches do not use the slots: one per
  reflector). A token taken and then spent queueing for a connection would let a slow server
  that recovers receive the whole backlog at once, far above ``burst + qps`` per second
  (measured: 219 in one second; 113 in a 200-pod burst on a loaded node);
* ordinary requests have a connect and a total timeout; watches have a connect timeout and a
  socket-read timeout (silence longer than ``watch_read_timeout`` kills the stream) but no total;
* failures are ``multusd.k8s.errors`` values built from the server's ``Status`` body;
* the bearer token is re-read from ``token_file`` (bound service-account tokens rotate hourly)
  at most once a minute, in a thread, and only when the file's mtime changed;
* what the server's answers say about its health is kept in ``contacts``
  (``multusd.k8s.health``): the cheap view ``/readyz`` reports.

It speaks HTTP/1.1, so each open watch holds one connection besides the request slots.

Apart from the client because none of it is a decision about a request (which verb, whether to
retry, how to decode): it is the same for every attempt of every call, watches included.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from multusd import __version__
from multusd.errors import StartupError
from multusd.k8s import kproto
from multusd.k8s.errors import (
    ApiError,
    TransportError,
    error_from_response,
    error_from_status,
    parse_retry_after,
)
from multusd.k8s.health import Contacts, is_failure
from multusd.k8s.http import HttpClient, HttpError
from multusd.k8s.kubeconfig import ClusterConfig
from multusd.k8s.ratelimit import Priority, TokenBucket
from multusd.protobuf import MEDIA_TYPE

log = logging.getLogger(__name__)

IDLE_CONNECTIONS = 4
"""Connections kept open for reuse. Each idle TLS connection holds asyncio's 128 KiB read buffer
and OpenSSL's state: with one per request slot (16) they held ~3 MiB of the daemon's 50 Mi
after a 200-pod burst, and back-to-back bursts then waited for memory (docs/performance.md,
"Under a 50 Mi limit"). At 50 QPS a few requests overlap at most; more are connected anew."""
TOKEN_RECHECK = 60.0  # seconds between token-file mtime checks (kubernetes_asyncio: 1 min)
_WAIT_LOG_THRESHOLD = 0.010  # bucket waits above this are logged at debug
TRANSPORT_ERRORS = (HttpError, OSError, TimeoutError)
# client-go's order: protobuf preferred, JSON for whatever has no protobuf form.
PROTOBUF_ACCEPT = f"{MEDIA_TYPE}, application/json"


@dataclass(frozen=True, slots=True)
class Call:
    """One API call, as every attempt of it is sent."""

    method: str
    path: str
    key: tuple[str, str]
    params: dict[str, str] | None
    data: bytes | None
    content_type: str
    deadline: float | None  # loop time; None: ``request_timeout`` per attempt
    priority: Priority


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
        if params is not None and params.get("watch") in ("true", "1"):
            verb = "watch"
        else:
            verb = "get" if named else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, method.lower()
        )
    return verb, resource


class _Token:
    """The bearer token, re-read from its file when the file changes (checked once a minute)."""

    def __init__(self, token: str | None, path: str | None) -> None:
        self.value = token
        self.path = path
        self.reloads = 0
        self._mtime: float | None = None
        self._next_check = 0.0 if path else float("inf")

    async def current(self) -> str | None:
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + TOKEN_RECHECK  # before awaiting: one reader at a time
            await asyncio.to_thread(self._reload)
        return self.value

    def _reload(self) -> None:
        assert self.path is not None
        try:
            mtime = os.stat(self.path).st_mtime
            if self.value is not None and mtime == self._mtime:
                return
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                value = fh.read().strip()
        except OSError as exc:
            log.warning("cannot re-read the API token from %s: %s", self.path, exc)
            return
        if value:
            if self.value is not None and value != self.value:
                self.reloads += 1
                log.info("API token reloaded from %s", self.path)
            self.value = value
            self._mtime = mtime


class Transport:
    """The HTTP client, the request slots, the token bucket and the bearer token of one client."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        qps: float,
        burst: int,
        pool_size: int,
        connect_timeout: float,
        request_timeout: float,
        watch_read_timeout: float,
        user_agent: str,
        protobuf_pods: bool,
    ) -> None:
        self.config = config
        self.bucket = TokenBucket(qps, burst)
        self.on_bucket_wait: Callable[[float], None] | None = None
        """Told every wait for a bucket token (the daemon's metrics histogram)."""
        self.base = config.server.rstrip("/")
        self.token = _Token(config.token, config.token_file)
        self._http: HttpClient | None = None
        self.requests: Counter[tuple[str, str]] = Counter()
        self.statuses: Counter[int] = Counter()
        self.watches_open = 0
        self._slots = asyncio.Semaphore(pool_size)
        self._pool_size = pool_size
        self.contacts = Contacts()
        """What the server's answers say about its health, per resource (``/readyz``)."""
        self.protobuf_pods = protobuf_pods
        self._connect_timeout = connect_timeout
        self._user_agent = user_agent
        self.request_timeout = request_timeout
        """Seconds an attempt may take in all (connect included) when its call has no deadline."""
        self.watch_read_timeout = watch_read_timeout
        """Seconds a watch may stay silent before it is given up."""

    async def start(self) -> None:
        if self._http is not None:
            return
        try:
            ssl_context = await asyncio.to_thread(self.config.ssl_context)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise StartupError(f"bad TLS material in {self.config.source}: {exc}") from exc
        agent = self._user_agent
        if "/" not in agent:
            agent = f"{agent}/{__version__}"
        if ssl_context is None and self.base.lower().startswith("https://"):
            ssl_context = await asyncio.to_thread(ssl.create_default_context)  # reads the CAs
        # No connection limit of the client's own: requests are bounded by ``_slots`` (a slot is
        # taken before the token, so a token is never spent waiting for a connection) and
        # watches by their owners; IDLE_CONNECTIONS of them stay open for reuse.
        self._http = HttpClient(
            self.base,
            ssl_context=ssl_context,
            headers={"Accept": "application/json", "User-Agent": agent},
            connect_timeout=self._connect_timeout,
            max_idle=IDLE_CONNECTIONS,
        )

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    def http(self) -> HttpClient:
        if self._http is None:
            raise RuntimeError("KubeClient used outside 'async with' (or after close())")
        return self._http

    async def prepare(self, key: tuple[str, str], priority: Priority) -> dict[str, str]:
        """Count the request, wait for a token, and build the per-request headers."""
        self.requests[key] += 1
        waited = await self.bucket.acquire(priority)
        if self.on_bucket_wait is not None:
            self.on_bucket_wait(waited)
        if waited > _WAIT_LOG_THRESHOLD:
            log.debug("waited %.3f s for the API rate limit: %s %s", waited, key[0], key[1])
        headers: dict[str, str] = {}
        if self.protobuf_pods and key[1] == "pods" and key[0] in ("get", "list", "watch"):
            headers["Accept"] = PROTOBUF_ACCEPT
        token = await self.token.current()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def send(self, http: HttpClient, call: Call) -> tuple[int, str, bytes]:
        """One attempt: a slot, then a token, then the request; (status, media type, body)."""
        key = call.key
        collection = key[0] == "list"
        async with self._slots:
            headers = await self.prepare(key, call.priority)
            if call.data is not None:
                headers["Content-Type"] = call.content_type
            seconds = self.request_timeout
            if call.deadline is not None:
                seconds = max(0.001, call.deadline - asyncio.get_running_loop().time())
            try:
                resp = await http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    body=call.data,
                    headers=headers,
                    timeout=seconds,
                )
            except TRANSPORT_ERRORS as exc:
                self.statuses[0] += 1
                lost = transport_error(call.method, key, exc)
                self.note_failure(key, lost, collection)
                raise lost from exc
            status, media, payload = resp.status, resp.content_type, resp.body
            if status >= 400:
                self.statuses[status] += 1
                err = error_of(status, payload, resp.headers, media)
                self.note_failure(key, err, collection)
                raise err
        self.statuses[status] += 1
        if collection:
            self.contacts.succeeded(key[1])
        else:
            self.contacts.answered()
        return status, media, payload

    def note_failure(self, key: tuple[str, str], err: ApiError, collection: bool) -> None:
        """Tell ``contacts`` about a failed answer (or its absence), or a healthy refusal."""
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


def error_of(status: int, payload: bytes, headers: Mapping[str, str], media: str) -> ApiError:
    """The error of a failed response, its Status read in whichever encoding it came."""
    if media == MEDIA_TYPE:
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
