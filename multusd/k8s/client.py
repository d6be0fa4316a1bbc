"""The daemon's one Kubernetes API client: HTTP/1.1 (k8s.http), JSON dicts, one token bucket.

Why not kubernetes_asyncio: importing it costs ~38 MiB and 0.5 s (every generated model), its
default timeouts are "never", and its model classes cost ~0.6 ms per pod to build. What a node
daemon needs is five verbs on raw JSON, so this is those five verbs:

* a 429, or a 5xx carrying Retry-After, is retried as client-go retries it when the caller
  asks for ``retries`` (the request path and events pass ``ClientSettings.max_retries``,
  client-go's 10): after sleeping Retry-After, and through the bucket again; never past the
  caller's ``timeout``, which bounds the whole call. Lists and watches are not retried here:
  their one caller, the reflector, backs off on its own with Retry-After as a floor;
* what every attempt passes through (the request slots, the token bucket, the bearer token,
  the timeouts, the errors built from the server's ``Status``, ``contacts``) is
  :mod:`multusd.k8s.transport`; how a watch stream is read, :mod:`multusd.k8s.watchstream`.

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
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from multusd.k8s import kproto
from multusd.k8s.errors import ApiError, TooManyRequests
from multusd.k8s.kubeconfig import ClusterConfig, load_cluster_config
from multusd.k8s.ratelimit import BucketStatistics, Priority
from multusd.k8s.transport import Call, Transport, resource_of
from multusd.k8s.watchstream import open_watch
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


@dataclass(frozen=True)
class ClientStatistics:
    requests: Mapping[tuple[str, str], int]  # (verb, resource) -> count; verbs as RBAC names
    statuses: Mapping[int, int]  # HTTP status -> count; 0 for transport failures
    watches_open: int
    token_reloads: int
    bucket: BucketStatistics
    retries: int = 0  # requests repeated after a 429 / 5xx with Retry-After


class KubeClient:
    """One per daemon: ``async with KubeClient(config, settings) as client: ...``."""

    def __init__(self, config: ClusterConfig, settings: ClientSettings | None = None) -> None:
        self.config = config
        self.settings = settings or ClientSettings()
        self._transport = Transport(
            config,
            qps=self.settings.qps,
            burst=self.settings.burst,
            pool_size=self.settings.pool_size,
            connect_timeout=self.settings.connect_timeout,
            request_timeout=self.settings.request_timeout,
            watch_read_timeout=self.settings.watch_read_timeout,
            user_agent=self.settings.user_agent,
            protobuf_pods=self.settings.protobuf_pods,
        )
        self.bucket = self._transport.bucket
        self._retries = 0
        self.contacts = self._transport.contacts
        """What the server's answers say about its health, per resource (``/readyz``)."""

    @property
    def on_bucket_wait(self) -> Callable[[float], None] | None:
        """Told every wait for a bucket token (the daemon's metrics histogram)."""
        return self._transport.on_bucket_wait

    @on_bucket_wait.setter
    def on_bucket_wait(self, observer: Callable[[float], None] | None) -> None:
        self._transport.on_bucket_wait = observer

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
        await self._transport.start()

    async def close(self) -> None:
        await self._transport.close()

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
        return open_watch(self._transport, path, params)

    def statistics(self) -> ClientStatistics:
        return ClientStatistics(
            requests=dict(self._transport.requests),
            statuses=dict(self._transport.statuses),
            watches_open=self._transport.watches_open,
            token_reloads=self._transport.token.reloads,
            bucket=self.bucket.statistics(),
            retries=self._retries,
        )

    # --- the request and its retries ------------------------------------------------------

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
        http = self._transport.http()
        key = resource_of(method, path, params)
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
        loop = asyncio.get_running_loop()
        call = Call(
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
                status, media, payload = await self._transport.send(http, call)
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
            if media == MEDIA_TYPE and self._transport.protobuf_pods:
                self._transport.give_up_protobuf(f"{method} {path}", exc)
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
