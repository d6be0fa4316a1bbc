"""The daemon's one Kubernetes API client: kubernetes_asyncio, raw bodies, one token bucket.

The connection pool, TLS, authentication and the API's paths are kubernetes_asyncio's
(``multusd.k8s.apiconfig`` loads its ``Configuration``); every request it makes passes the
request slots, the token bucket and the 401 rule of :class:`~multusd.k8s.apiclient.
LimitedApiClient`. Bodies are never turned into the generated models (~0.6 ms a pod): every
call passes ``_preload_content=False`` and the body is decoded here.

* NADs are read through ``CustomObjectsApi``, the network-status write is
  ``CoreV1Api.patch_namespaced_pod_status`` with a merge patch, events
  ``CoreV1Api.create_namespaced_event``; lists and pod reads use ``call_api`` with the raw
  path (the generated list methods lack ``sendInitialEvents``, and pods may be protobuf);
* the DRA reads (``multusd.k8s.dra``: one ResourceClaim, ResourceSlices by field selector) are
  ``call_api`` with the raw path too, JSON, made only for pods that have claims;
* a 429, or a 5xx carrying Retry-After, is retried as client-go retries it when the caller
  asks for ``retries`` (the request path and events pass ``ClientSettings.max_retries``,
  client-go's 10): after sleeping Retry-After, and through the bucket again; never past the
  caller's ``timeout``, which bounds the whole call. Lists and watches are not retried here:
  their one caller, the reflector, backs off on its own with Retry-After as a floor;
* how a watch stream is read: :mod:`multusd.k8s.watchstream`.

With ``protobuf_pods`` (the default, as client-go's), pod reads (get, list, watch) ask for
Kubernetes protobuf first and JSON second, and each response is decoded by its Content-Type:
protobuf through ``multusd.k8s.kproto`` (which returns pods already trimmed to what the daemon
reads), anything else as JSON. A protobuf body our decoder cannot read turns protobuf off for
the rest of the client's life (one warning) and the request is repeated as JSON: a server that
sends something unexpected costs one extra request, never a failed ADD.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

from multusd.errors import EXIT_SERVER, StartupError
from multusd.k8s import kproto
from multusd.k8s.apiclient import AUTH_SETTINGS, LimitedApiClient, media_type
from multusd.k8s.apiconfig import ApiConfig, load_api_config
from multusd.k8s.errors import ApiError, TooManyRequests
from multusd.k8s.health import Contacts
from multusd.k8s.names import checked_name, checked_namespace
from multusd.k8s.ratelimit import BucketStatistics, Priority, TokenBucket
from multusd.k8s.watchstream import open_watch
from multusd.protobuf import MEDIA_TYPE

__all__ = [
    "ApiConfig",
    "ClientSettings",
    "ClientStatistics",
    "KubeClient",
    "Priority",
    "load_api_config",
]

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class CustomResource:
    """A custom resource's API coordinates; ``path`` is its cluster-wide collection."""

    group: str
    version: str
    plural: str

    @property
    def path(self) -> str:
        return f"/apis/{self.group}/{self.version}/{self.plural}"


log = logging.getLogger(__name__)

Obj = dict[str, Any]

RESOURCE_V1 = "/apis/resource.k8s.io/v1"
"""The DRA API (``resource.k8s.io/v1``) upstream's ``draclient`` reads: ResourceClaims and
ResourceSlices (``multusd.k8s.dra``)."""
RESOURCE_SLICES_PATH = f"{RESOURCE_V1}/resourceslices"


def resource_claim_path(namespace: str, name: str) -> str:
    """One ResourceClaim's path, built as client-go builds it: the names checked first
    (:class:`~multusd.k8s.names.InvalidName`, no request), no ``namespaces/`` segment for an
    empty namespace."""
    name = checked_name(name)
    if namespace := checked_namespace(namespace):
        return f"{RESOURCE_V1}/namespaces/{namespace}/resourceclaims/{name}"
    return f"{RESOURCE_V1}/resourceclaims/{name}"


@dataclass(frozen=True)
class ClientSettings:
    qps: float = 50.0
    burst: int = 50
    connect_timeout: float = 5.0
    request_timeout: float = 30.0  # whole non-watch request
    watch_read_timeout: float = 90.0  # max silence on a watch stream (socket read)
    user_agent: str = "multusd"  # the version is appended
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

    def __init__(self, config: ApiConfig, settings: ClientSettings | None = None) -> None:
        self.config = config
        self.settings = settings or ClientSettings()
        self._api: LimitedApiClient | None = None
        self._last_api: LimitedApiClient | None = None  # its counters outlive close()
        self._on_bucket_wait: Callable[[float], None] | None = None
        self._retries = 0

    @property
    def api(self) -> LimitedApiClient:
        if self._api is None:
            raise RuntimeError("KubeClient used outside 'async with' (or after close())")
        return self._api

    @property
    def bucket(self) -> TokenBucket:
        """The one token bucket every request takes a token from."""
        return self.api.bucket

    @property
    def contacts(self) -> Contacts:
        """What the server's answers say about its health, per resource (``/readyz``)."""
        return self.api.contacts

    @property
    def on_bucket_wait(self) -> Callable[[float], None] | None:
        """Told every wait for a bucket token (the daemon's metrics histogram)."""
        return self._on_bucket_wait

    @on_bucket_wait.setter
    def on_bucket_wait(self, observer: Callable[[float], None] | None) -> None:
        self._on_bucket_wait = observer
        if self._api is not None:
            self._api.on_bucket_wait = observer

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
        if self._api is not None:
            return
        s = self.settings
        # The library opens its aiohttp session (and reads the TLS files) here, on the loop.
        try:
            api = LimitedApiClient(
                self.config.configuration,
                token=self.config.token,
                qps=s.qps,
                burst=s.burst,
                pool_size=s.pool_size,
                connect_timeout=s.connect_timeout,
                request_timeout=s.request_timeout,
                watch_read_timeout=s.watch_read_timeout,
                user_agent=s.user_agent,
                protobuf_pods=s.protobuf_pods,
            )
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise StartupError(
                f"bad TLS material in {self.config.source}: {exc}", EXIT_SERVER
            ) from exc
        self._api = self._last_api = api
        self._api.on_bucket_wait = self._on_bucket_wait
        if self.config.certificate is not None:
            self.config.certificate.attach(api)  # renewed certificates reach this client
        self.core = CoreV1Api(self._api)
        self.custom = CustomObjectsApi(self._api)

    async def close(self) -> None:
        api, self._api = self._api, None
        if api is not None:
            if self.config.certificate is not None:
                self.config.certificate.detach(api)
            await api.close()

    # --- verbs -----------------------------------------------------------------------------

    # ``timeout`` bounds the whole call, retries included (``None``: ``request_timeout`` per
    # attempt); ``retries`` how often a 429 / 5xx with Retry-After is retried (client-go:
    # ``ClientSettings.max_retries``). The bucket class comes from the resource (events are
    # background): ``multusd.k8s.apiclient``.

    async def get(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
        retries: int = 0,
    ) -> Obj:
        query = list(params.items()) if params else None

        def send(seconds: float | None) -> Awaitable[Any]:
            return self.api.call_api(  # type: ignore[no-any-return]
                path, "GET", query_params=query, auth_settings=AUTH_SETTINGS,
                _preload_content=False, _request_timeout=seconds,
            )  # fmt: skip

        return await self._call(f"GET {path}", send, timeout=timeout, retries=retries)

    async def get_custom(
        self,
        resource: CustomResource,
        namespace: str,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
        retries: int = 0,
    ) -> Obj:
        """One namespaced custom object (a NetworkAttachmentDefinition), through
        ``CustomObjectsApi``."""

        def send(seconds: float | None) -> Awaitable[Any]:
            return self.custom.get_namespaced_custom_object(
                resource.group, resource.version, namespace, resource.plural, name,
                _preload_content=False, _request_timeout=seconds,
            )  # fmt: skip

        what = f"get {resource.plural} {namespace}/{name}"
        return await self._call(what, send, timeout=timeout,
                                retries=retries)  # fmt: skip

    async def get_resource_claim(
        self,
        namespace: str,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
        retries: int | None = None,
    ) -> Obj:
        """One ResourceClaim (``resource.k8s.io/v1``), as JSON. ``retries`` defaults to
        ``ClientSettings.max_retries``: client-go retries a 429 on every request, and the DRA
        reads have no caller of their own that would choose otherwise."""
        return await self.get(
            resource_claim_path(namespace, name),
            timeout=timeout,
            retries=self.settings.max_retries if retries is None else retries,
        )

    async def list_resource_slices(
        self,
        field_selector: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
        retries: int | None = None,
    ) -> Obj:
        """ResourceSlices matching ``field_selector`` (``spec.nodeName``, ``spec.driver``), one
        unpaged LIST as client-go's ``List`` without a limit sends it."""
        return await self.get(
            RESOURCE_SLICES_PATH,
            {"fieldSelector": field_selector},
            timeout=timeout,
            retries=self.settings.max_retries if retries is None else retries,
        )

    def request_url(self, path: str, params: Mapping[str, str] | None = None) -> str:
        """The URL of a request as Go prints it in a ``*url.Error`` (``Get "<url>": ...``): the
        server, the path, the query encoded as ``url.Values.Encode`` (keys sorted, escaped as
        ``url.QueryEscape``)."""
        query = urlencode(sorted((params or {}).items()))
        return f"{self.config.server.rstrip('/')}{path}" + (f"?{query}" if query else "")

    async def patch_pod_status(
        self, namespace: str, name: str, body: Obj, *, retries: int = 0
    ) -> Obj:
        """A merge patch of a pod's status subresource (``patch_namespaced_pod_status``)."""

        def send(seconds: float | None) -> Awaitable[Any]:
            # The stub omits the ``_content_type`` the method takes (without it: a strategic
            # merge patch, which custom resources and older servers refuse).
            return self.core.patch_namespaced_pod_status(  # type: ignore[call-arg]
                name, namespace, body, _content_type=MERGE_PATCH,
                _preload_content=False, _request_timeout=seconds,
            )  # fmt: skip

        return await self._call(f"patch pods/status {namespace}/{name}", send, retries=retries)

    async def create_event(self, namespace: str, body: Obj, *, retries: int = 0) -> Obj:
        """Post one Event (``create_namespaced_event``)."""

        def send(seconds: float | None) -> Awaitable[Any]:
            # A plain dict is serialised as it is; the stub asks for the generated model.
            return self.core.create_namespaced_event(
                namespace, body,  # type: ignore[arg-type]
                _preload_content=False, _request_timeout=seconds,
            )  # fmt: skip

        return await self._call(f"create event in {namespace}", send, retries=retries)

    async def post(self, path: str, body: Obj, *, retries: int = 0) -> Obj:
        """A POST of ``body`` to a raw path (tests and tools: the daemon's own writes have
        typed methods above)."""

        def send(seconds: float | None) -> Awaitable[Any]:
            return self.api.call_api(  # type: ignore[no-any-return]
                path, "POST", body=body, auth_settings=AUTH_SETTINGS,
                _preload_content=False, _request_timeout=seconds,
            )  # fmt: skip

        return await self._call(f"POST {path}", send, retries=retries)

    async def put(self, path: str, body: Obj, *, retries: int = 0) -> Obj:
        """A PUT of ``body`` to a raw path (the cert approver's CSR ``approval`` update)."""

        def send(seconds: float | None) -> Awaitable[Any]:
            return self.api.call_api(  # type: ignore[no-any-return]
                path, "PUT", body=body, auth_settings=AUTH_SETTINGS,
                _preload_content=False, _request_timeout=seconds,
            )  # fmt: skip

        return await self._call(f"PUT {path}", send, retries=retries)

    def watch(
        self, path: str, params: Mapping[str, str]
    ) -> AbstractAsyncContextManager[AsyncIterator[Obj]]:
        """Decoded watch events (``{"type": ..., "object": {...}}``), one per line of the
        stream. An ``ERROR`` event raises: ``Gone`` for a 410 Status, else ``ApiError``."""
        return open_watch(self.api, path, params)

    def statistics(self) -> ClientStatistics:
        api = self._api or self._last_api
        if api is None:
            raise RuntimeError("KubeClient.statistics() before start()")
        return ClientStatistics(
            requests=dict(api.requests),
            statuses=dict(api.statuses),
            watches_open=api.watches_open,
            token_reloads=self.config.token.reloads if self.config.token else 0,
            bucket=api.bucket.statistics(),
            retries=self._retries,
        )

    # --- the request, its retries and its body ------------------------------------------------

    async def _call(
        self,
        what: str,
        send: Callable[[float | None], Awaitable[Any]],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
        retries: int = 0,
    ) -> Obj:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        attempt = 0
        while True:
            seconds = None if deadline is None else max(0.001, deadline - loop.time())
            try:
                response = await send(seconds)
                break
            except ApiError as exc:
                wait = _retry_after(exc, attempt < retries, deadline, loop.time())
                if wait is None:
                    raise
                attempt += 1
                self._retries += 1
                log.debug("%s: %s; retry %d in %.1f s", what, exc, attempt, wait)
            await asyncio.sleep(wait)
        media = media_type(response.getheaders())
        try:
            if media == MEDIA_TYPE:
                decoded = kproto.decode(response.data)
            else:
                decoded = json.loads(response.data) if response.data else {}
        except ValueError as exc:
            if media == MEDIA_TYPE and self.api.protobuf_pods:
                self.api.give_up_protobuf(what, exc)
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                return await self._call(what, send, timeout=remaining, retries=retries)
            raise ApiError(f"undecodable response to {what}: {exc}",
                           status=response.status) from exc  # fmt: skip
        if not isinstance(decoded, dict):
            raise ApiError(f"unexpected response to {what}: not an object", status=response.status)
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
