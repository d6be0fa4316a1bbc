"""The daemon's one Kubernetes API client: aiohttp, JSON dicts, one token bucket.

Why not kubernetes_asyncio: importing it costs ~38 MiB and 0.5 s (every generated model), its
default timeouts are "never", and its model classes cost ~0.6 ms per pod to build. What a node
daemon needs is five verbs on raw JSON, so this is those five verbs:

* every request, watch starts included, first takes a token from ``bucket`` (QPS 50, burst 50
  like upstream's client-go settings), in its :class:`~multusd.k8s.ratelimit.Priority` class
  (Events are ``BACKGROUND``, everything else ``REQUEST``); the wait is counted and logged at
  debug when it matters;
* a request takes its token only once it holds one of ``pool_size`` request slots, and the
  connection pool never makes a slot-holder wait (watches do not use the slots: one per
  reflector). A token taken and then spent queueing for a connection would let a slow server
  that recovers receive the whole backlog at once, far above ``burst + qps`` per second
  (measured: 219 in one second; 113 in a 200-pod burst on a loaded node);
* a 429, or a 5xx carrying Retry-After, is retried as client-go retries it when the caller
  asks for ``retries`` (the request path and events pass ``ClientSettings.max_retries``,
  client-go's 10): after sleeping Retry-After, and through the bucket again; never past the
  caller's ``timeout``, which bounds the whole call. Lists and watches are not retried here:
  their one caller, the reflector, backs off on its own with Retry-After as a floor;
* ordinary requests have a connect and a total timeout; watches have a connect timeout and a
  socket-read timeout (silence longer than ``watch_read_timeout`` kills the stream) but no total;
* failures are ``multusd.k8s.errors`` values built from the server's ``Status`` body;
* the bearer token is re-read from ``token_file`` (bound service-account tokens rotate hourly)
  at most once a minute, in a thread, and only when the file's mtime changed;
* what the server's answers say about its health is kept in ``contacts``
  (``multusd.k8s.health``): the cheap view ``/readyz`` reports.

aiohttp speaks HTTP/1.1, so each open watch holds one connection besides the request slots.

With ``protobuf_pods`` (the default, as client-go's), pod reads (get, list, watch) ask for
Kubernetes protobuf first and JSON second, and each response is decoded by its Content-Type:
protobuf through ``multusd.k8s.kproto`` (which returns pods already trimmed to what the daemon
reads), anything else as JSON. Every other request, NADs included (CRDs have no protobuf form),
stays JSON. A protobuf body our decoder cannot read turns protobuf off for the rest of the
client's life (one warning) and the request is repeated as JSON: a server that sends something
unexpected costs one extra request, never a failed ADD.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import ssl
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp

from multusd import __version__
from multusd.errors import StartupError
from multusd.k8s import kproto
from multusd.k8s.errors import (
    ApiError,
    Gone,
    TooManyRequests,
    TransportError,
    error_from_response,
    error_from_status,
    parse_retry_after,
)
from multusd.k8s.health import Contacts, is_failure
from multusd.k8s.kubeconfig import ClusterConfig, load_cluster_config
from multusd.k8s.ratelimit import BucketStatistics, Priority, TokenBucket
from multusd.protobuf import MEDIA_TYPE

__all__ = [
    "ClientSettings",
    "ClientStatistics",
    "ClusterConfig",
    "KubeClient",
    "Priority",
    "load_cluster_config",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

TOKEN_RECHECK = 60.0  # seconds between token-file mtime checks (kubernetes_asyncio: 1 min)
_WAIT_LOG_THRESHOLD = 0.010  # bucket waits above this are logged at debug
_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
# client-go's order: protobuf preferred, JSON for whatever has no protobuf form.
PROTOBUF_ACCEPT = f"{MEDIA_TYPE}, application/json"


@dataclass(frozen=True)
class ClientSettings:
    qps: float = 50.0
    burst: int = 50
    connect_timeout: float = 5.0
    request_timeout: float = 30.0  # whole non-watch request
    watch_read_timeout: float = 90.0  # max silence on a watch stream (socket read)
    user_agent: str = "multusd"
    pool_size: int = 16  # requests in flight at once (watches come on top: one per reflector)
    protobuf_pods: bool = True  # ask for protobuf on pod get/list/watch (JSON fallback)
    max_retries: int = 10  # retries of a 429 / 5xx with Retry-After (client-go's maxRetries)


@dataclass(frozen=True, slots=True)
class _Call:
    """One API call, as every attempt of it is sent."""

    method: str
    path: str
    key: tuple[str, str]
    params: dict[str, str] | None
    data: bytes | None
    content_type: str
    deadline: float | None  # loop time; None: ``request_timeout`` per attempt
    priority: Priority


@dataclass(frozen=True)
class ClientStatistics:
    requests: Mapping[tuple[str, str], int]  # (verb, resource) -> count; verbs as RBAC names
    statuses: Mapping[int, int]  # HTTP status -> count; 0 for transport failures
    watches_open: int
    token_reloads: int
    bucket: BucketStatistics
    retries: int = 0  # requests repeated after a 429 / 5xx with Retry-After


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


class KubeClient:
    """One per daemon: ``async with KubeClient(config, settings) as client: ...``."""

    def __init__(self, config: ClusterConfig, settings: ClientSettings | None = None) -> None:
        self.config = config
        self.settings = settings or ClientSettings()
        self.bucket = TokenBucket(self.settings.qps, self.settings.burst)
        self.on_bucket_wait: Callable[[float], None] | None = None
        """Told every wait for a bucket token (the daemon's metrics histogram)."""
        self._base = config.server.rstrip("/")
        self._token = _Token(config.token, config.token_file)
        self._session: aiohttp.ClientSession | None = None
        self._requests: Counter[tuple[str, str]] = Counter()
        self._statuses: Counter[int] = Counter()
        self._watches_open = 0
        self._retries = 0
        self._slots = asyncio.Semaphore(self.settings.pool_size)
        self.contacts = Contacts()
        """What the server's answers say about its health, per resource (``/readyz``)."""
        self._protobuf_pods = self.settings.protobuf_pods
        self._timeout = aiohttp.ClientTimeout(
            total=self.settings.request_timeout,
            sock_connect=self.settings.connect_timeout,
        )
        self._watch_timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=self.settings.connect_timeout,
            sock_read=self.settings.watch_read_timeout,
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> KubeClient:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        if self._session is not None:
            return
        try:
            ssl_context = await asyncio.to_thread(self.config.ssl_context)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise StartupError(f"bad TLS material in {self.config.source}: {exc}") from exc
        agent = self.settings.user_agent
        if "/" not in agent:
            agent = f"{agent}/{__version__}"
        # No connection limit of aiohttp's own: requests are bounded by ``_slots`` (a slot is
        # taken before the token, so a token is never spent waiting for a connection) and
        # watches by their owners.
        connector = aiohttp.TCPConnector(
            limit=0, ssl=ssl_context if ssl_context is not None else True
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={
                "Accept": "application/json",
                "User-Agent": agent,
            },
        )

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    # --- verbs -----------------------------------------------------------------------------

    # ``timeout`` bounds the whole call, retries included (``None``: ``request_timeout`` per
    # attempt); ``priority`` is the call's class in the token bucket; ``retries`` how often a
    # 429 / 5xx with Retry-After is retried (client-go: ``ClientSettings.max_retries``).

    async def get(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
        priority: Priority = Priority.REQUEST,
        retries: int = 0,
    ) -> Obj:
        return await self._request(
            "GET", path, params=params, timeout=timeout, priority=priority, retries=retries
        )

    async def patch(
        self,
        path: str,
        body: Obj,
        *,
        content_type: str = "application/merge-patch+json",
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
        priority: Priority = Priority.REQUEST,
        retries: int = 0,
    ) -> Obj:
        return await self._request(
            "PATCH", path, body=body, content_type=content_type, timeout=timeout,
            priority=priority, retries=retries,
        )  # fmt: skip

    async def post(
        self,
        path: str,
        body: Obj,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
        priority: Priority = Priority.REQUEST,
        retries: int = 0,
    ) -> Obj:
        return await self._request(
            "POST", path, body=body, timeout=timeout, priority=priority, retries=retries
        )

    def watch(
        self, path: str, params: Mapping[str, str]
    ) -> AbstractAsyncContextManager[AsyncIterator[Obj]]:
        """Decoded watch events (``{"type": ..., "object": {...}}``), one per line of the
        stream. An ``ERROR`` event raises: ``Gone`` for a 410 Status, else ``ApiError``."""
        return self._watch(path, params)

    def statistics(self) -> ClientStatistics:
        return ClientStatistics(
            requests=dict(self._requests),
            statuses=dict(self._statuses),
            watches_open=self._watches_open,
            token_reloads=self._token.reloads,
            bucket=self.bucket.statistics(),
            retries=self._retries,
        )

    # --- internals -------------------------------------------------------------------------

    def _require_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("KubeClient used outside 'async with' (or after close())")
        return self._session

    async def _prepare(self, key: tuple[str, str], priority: Priority) -> dict[str, str]:
        """Count the request, wait for a token, and build the per-request headers."""
        self._requests[key] += 1
        waited = await self.bucket.acquire(priority)
        if self.on_bucket_wait is not None:
            self.on_bucket_wait(waited)
        if waited > _WAIT_LOG_THRESHOLD:
            log.debug("waited %.3f s for the API rate limit: %s %s", waited, key[0], key[1])
        headers: dict[str, str] = {}
        if self._protobuf_pods and key[1] == "pods" and key[0] in ("get", "list", "watch"):
            headers["Accept"] = PROTOBUF_ACCEPT
        token = await self._token.current()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Obj | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
        priority: Priority = Priority.REQUEST,
        retries: int = 0,
    ) -> Obj:
        session = self._require_session()
        key = resource_of(method, path, params)
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
        loop = asyncio.get_running_loop()
        call = _Call(
            method=method,
            path=path,
            key=key,
            params=dict(params) if params else None,
            data=data,
            content_type=content_type,
            deadline=None if timeout is None else loop.time() + timeout,
            priority=priority,
        )
        attempt = 0
        while True:
            try:
                status, media, payload = await self._send(session, call)
                break
            except ApiError as exc:
                wait = _retry_after(exc, attempt < retries, call.deadline, loop.time())
                if wait is None:
                    raise
                attempt += 1
                self._retries += 1
                log.debug("%s %s: %s; retry %d in %.1f s", key[0], key[1], exc, attempt, wait)
            await asyncio.sleep(wait)
        try:
            if media == MEDIA_TYPE:
                decoded = kproto.decode(payload)
            else:
                decoded = json.loads(payload) if payload else {}
        except ValueError as exc:
            if media == MEDIA_TYPE and self._protobuf_pods:
                self._give_up_protobuf(f"{method} {path}", exc)
                remaining = None if call.deadline is None else max(0.0, call.deadline - loop.time())
                return await self._request(
                    method, path, params=params, timeout=remaining, priority=priority,
                    retries=retries,
                )  # fmt: skip
            raise ApiError(
                f"undecodable response to {method} {path}: {exc}", status=status
            ) from exc
        if not isinstance(decoded, dict):
            raise ApiError(f"unexpected response to {method} {path}: not an object", status=status)
        return decoded

    async def _send(self, session: aiohttp.ClientSession, call: _Call) -> tuple[int, str, bytes]:
        """One attempt: a slot, then a token, then the request; (status, media type, body)."""
        key = call.key
        collection = key[0] == "list"
        async with self._slots:
            headers = await self._prepare(key, call.priority)
            if call.data is not None:
                headers["Content-Type"] = call.content_type
            req_timeout = self._timeout
            if call.deadline is not None:
                remaining = max(0.001, call.deadline - asyncio.get_running_loop().time())
                req_timeout = aiohttp.ClientTimeout(
                    total=remaining, sock_connect=min(remaining, self.settings.connect_timeout)
                )
            try:
                async with session.request(
                    call.method,
                    self._base + call.path,
                    params=call.params,
                    data=call.data,
                    headers=headers,
                    timeout=req_timeout,
                ) as resp:
                    payload = await resp.read()
                    status = resp.status
                    media = resp.content_type
                    if status >= 400:
                        self._statuses[status] += 1
                        err = _error(status, payload, resp.headers, media)
                        self._note_failure(key, err, collection)
                        raise err
            except _TRANSPORT_ERRORS as exc:
                self._statuses[0] += 1
                err = _transport_error(call.method, key, exc)
                self._note_failure(key, err, collection)
                raise err from exc
        self._statuses[status] += 1
        if collection:
            self.contacts.succeeded(key[1])
        else:
            self.contacts.answered()
        return status, media, payload

    def _note_failure(self, key: tuple[str, str], err: ApiError, collection: bool) -> None:
        """Tell ``contacts`` about a failed answer (or its absence), or a healthy refusal."""
        if is_failure(err.status, own_list_or_watch=collection):
            self.contacts.failed(key[1] if collection else None, f"{type(err).__name__}: {err}")
        else:
            self.contacts.answered()

    @contextlib.asynccontextmanager
    async def _watch(
        self, path: str, params: Mapping[str, str]
    ) -> AsyncIterator[AsyncIterator[Obj]]:
        session = self._require_session()
        query = dict(params)
        query.setdefault("watch", "true")
        key = resource_of("GET", path, query)
        headers = await self._prepare(key, Priority.REQUEST)
        try:
            resp = await session.get(
                self._base + path, params=query, headers=headers, timeout=self._watch_timeout
            )
        except _TRANSPORT_ERRORS as exc:
            self._statuses[0] += 1
            lost = _transport_error("GET", key, exc)
            self._note_failure(key, lost, True)
            raise lost from exc
        try:
            if resp.status >= 400:
                self._statuses[resp.status] += 1
                try:
                    payload = await resp.read()
                except _TRANSPORT_ERRORS:
                    payload = b""
                err = _error(resp.status, payload, resp.headers, resp.content_type)
                self._note_failure(key, err, True)
                raise err
            self._statuses[resp.status] += 1
            self._watches_open += 1
            resource = key[1]
            contacts = self.contacts
            contacts.succeeded(resource)
            contacts.watch_opened(resource)
            noted = functools.partial(contacts.succeeded, resource)
            if resp.content_type == MEDIA_TYPE:
                events = _protobuf_events(resp, key, self._give_up_protobuf, noted)
            else:
                events = _events(resp, key, noted)
            try:
                yield events
            except ApiError as exc:
                if not isinstance(exc, Gone):
                    self._note_failure(key, exc, True)
                raise
            finally:
                self._watches_open -= 1
                contacts.watch_closed(resource)
                await events.aclose()
        finally:
            # A watch left before its end must not return a half-read connection to the pool.
            resp.close()

    def _give_up_protobuf(self, what: str, exc: ValueError) -> None:
        """Read pods as JSON from now on: this server sent protobuf our decoder cannot read."""
        if self._protobuf_pods:
            self._protobuf_pods = False
            log.warning(
                "cannot decode protobuf from the API server (%s: %s); reading pods as JSON",
                what,
                exc,
            )


async def _events(
    resp: aiohttp.ClientResponse, key: tuple[str, str], noted: Callable[[], None]
) -> AsyncGenerator[Obj, None]:
    """Split the chunked stream into lines ourselves: aiohttp's readline refuses lines over
    its buffer limit, and one event carries a whole object. ``noted`` is told of each event."""
    buffer = bytearray()
    try:
        async for chunk in resp.content.iter_any():
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", start)) >= 0:
                line = bytes(buffer[start:end])
                start = end + 1
                if line.strip():
                    noted()
                    yield _decode_event(line, key)
            del buffer[:start]
    except _TRANSPORT_ERRORS as exc:
        raise _transport_error("GET", key, exc) from exc
    if buffer.strip():
        yield _decode_event(bytes(buffer), key)


async def _protobuf_events(
    resp: aiohttp.ClientResponse,
    key: tuple[str, str],
    undecodable: Callable[[str, ValueError], None],
    noted: Callable[[], None],
) -> AsyncGenerator[Obj, None]:
    """Length-prefixed protobuf watch frames, decoded to the same events as the JSON path
    (objects already trimmed). A frame we cannot decode ends the stream as a transport error
    after telling ``undecodable``, so the reflector's next watch asks for JSON."""
    reader = kproto.WatchFrameReader()
    try:
        async for chunk in resp.content.iter_any():
            try:
                events = reader.feed(chunk)
            except ValueError as exc:
                undecodable(f"watch {key[1]}", exc)
                raise TransportError(f"undecodable watch event on {key[1]}: {exc}") from exc
            for event in events:
                if event["type"] == "ERROR":
                    raise error_from_status(event["object"])
                noted()
                yield event
    except _TRANSPORT_ERRORS as exc:
        raise _transport_error("GET", key, exc) from exc
    try:
        reader.close()
    except ValueError as exc:
        raise TransportError(f"watch on {key[1]} ended inside an event: {exc}") from exc


def _retry_after(exc: ApiError, allowed: bool, deadline: float | None, now: float) -> float | None:
    """How long to wait before repeating a failed call, or ``None`` to raise ``exc``.

    client-go's rule (``rest/with_retry.go``, ``checkWait``): a 429 or any 5xx that carries
    Retry-After is retried after that many seconds, while retries are ``allowed``; anything
    else is not. We also never sleep past the caller's deadline.
    """
    if not allowed or exc.retry_after is None:
        return None
    if not (isinstance(exc, TooManyRequests) or exc.status >= 500):
        return None
    if deadline is not None and now + exc.retry_after >= deadline:
        return None
    return exc.retry_after


def _error(status: int, payload: bytes, headers: Mapping[str, str], media: str) -> ApiError:
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


def _decode_event(line: bytes, key: tuple[str, str]) -> Obj:
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise TransportError(f"undecodable watch event on {key[1]}: {exc}") from exc
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise TransportError(f"malformed watch event on {key[1]}")
    if event.get("type") == "ERROR":
        raise error_from_status(event["object"])
    return event


def _transport_error(method: str, key: tuple[str, str], exc: BaseException) -> TransportError:
    what = type(exc).__name__
    detail = str(exc) or what
    if isinstance(exc, TimeoutError):
        detail = f"timed out ({what})"
    return TransportError(f"{key[0]} {key[1]} ({method}) failed: {detail}")
