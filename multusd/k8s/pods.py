"""A CNI request's pod: cache first, one live GET as the fallback, and the status write.

Upstream's daemon polls its informer every 50 ms for up to 2.5 s, then makes one live GET with
a 50 ms deadline, which fails on any slow API server (#1461). We wait on the store's event
instead of polling, keep the 2.5 s budget, and give the fallback GET a real timeout. Static
pods (whose mirror pod may never reach the watch) are why the fallback exists at all.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cni_shim.errors import INTERNAL, CNIError
from multusd.k8s.client import KubeClient
from multusd.k8s.errors import ApiError, Conflict, NotFound, is_transient
from multusd.k8s.names import checked_name, checked_namespace
from multusd.k8s.store import Store

log = logging.getLogger(__name__)

CONFIG_SOURCE = "kubernetes.io/config.source"
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"

ANNOTATIONS_LIMIT = 256 * 1024
"""kube-apiserver's ``TotalAnnotationSizeLimitB``: the most all of an object's annotations may
hold, counted as the bytes of every key and value (apimachinery ``ValidateAnnotationsSize``).
An update past it is refused: 422, ``metadata.annotations: Too long: must have at most 262144
bytes``."""


class AnnotationsTooLarge(CNIError):
    """The network-status annotation would take the pod's annotations past
    :data:`ANNOTATIONS_LIMIT`: refused before any request, since the API server would refuse it
    and so it would again on every retry."""

    __slots__ = ()


def _utf8_len(text: str) -> int:
    """Go's ``len`` of the string: its UTF-8 bytes (a lone surrogate, which Go decodes as
    U+FFFD, counts 3 bytes either way)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def check_status_size(namespace: str, name: str, value: str, pod: Mapping[str, Any] | None) -> None:
    """Refuse a network-status ``value`` that would take the pod past :data:`ANNOTATIONS_LIMIT`.

    The PATCH replaces one annotation and keeps the others, so what counts is ``value`` and its
    key plus the pod's other annotations, as ``pod`` has them: the pod the ADD looked up (watch
    cache or GET), whose trimmed form keeps every annotation (``store.trim_pod``). Without a
    pod, only the value and its key count. One added since that read shows as the API server's
    own 422, which fails the write like any refusal.
    """
    own = _utf8_len(NETWORK_STATUS) + _utf8_len(value)
    annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    others = sum(
        _utf8_len(key) + _utf8_len(text)
        for key, text in annotations.items()
        if key != NETWORK_STATUS  # replaced by the PATCH
    )
    if own + others > ANNOTATIONS_LIMIT:
        raise AnnotationsTooLarge(
            INTERNAL,
            f"SetNetworkStatus: refusing to write the network-status annotation of pod "
            f"{namespace}/{name}: with it the pod's annotations would hold {own + others} bytes "
            f"({own} of them network-status, {others} the others), over the API server's limit "
            f"of {ANNOTATIONS_LIMIT} bytes for all of a pod's annotations",
        )


@dataclass(frozen=True, slots=True)
class PodLookupSettings:
    cache_wait: float = 2.5
    """How long an ADD waits for its pod to reach the watch cache (upstream: 2.5 s)."""
    live_get_timeout: float = 5.0
    """The fallback GET's timeout (upstream: 50 ms, a reported bug)."""
    direct_get: bool = False
    """Benchmark-only: GET every pod, never the cache (the seed's lookups, for A/B runs)."""
    status_attempts: int = 5
    """Tries for the network-status write (upstream: 5, on conflicts only). Each try is one
    client call that itself retries a 429 / 5xx with Retry-After as client-go does (up to
    ``ClientSettings.max_retries``, 10, sleeping Retry-After), so a throttling server is tried
    at least as persistently as upstream's daemon tries it."""
    status_backoff: float = 0.05
    """First retry delay of the status write; doubled each try, with jitter."""


def is_static(pod: dict[str, Any]) -> bool:
    """A kubelet static pod: its config source is a file or URL, not the API."""
    annotations = pod.get("metadata", {}).get("annotations") or {}
    source = annotations.get(CONFIG_SOURCE)
    return source is not None and source != "api"


def pod_path(namespace: str, name: str) -> str:
    """The pod's path; :class:`~multusd.k8s.names.InvalidName` for a name client-go refuses."""
    return f"/api/v1/namespaces/{checked_namespace(namespace)}/pods/{checked_name(name)}"


class PodLookup:
    """Pod reads and the network-status write for the commands, through one client."""

    def __init__(
        self, client: KubeClient, store: Store, settings: PodLookupSettings | None = None
    ) -> None:
        self.client = client
        self.store = store
        self.settings = settings or PodLookupSettings()

    async def get_pod(
        self, namespace: str, name: str, uid: str, *, is_del: bool
    ) -> dict[str, Any] | None:
        """The pod, or ``None`` when it does not exist (or, on DEL, is another pod by now).

        ADD waits for the cache, then falls back to one GET; DEL reads the cache only, since a
        missing pod is normal there and the delegate cache has what DEL needs.
        """
        label = f"{namespace}/{name}/{uid}"
        if self.settings.direct_get:
            pod = await self._get(namespace, name, label, is_del=is_del)
        else:
            pod = self.store.get(namespace, name)
            if pod is None and not is_del:
                pod = await self._wait_then_get(namespace, name, label)
        if pod is None:
            return None
        actual = pod.get("metadata", {}).get("uid", "")
        if uid and actual != uid and not is_static(pod):
            if is_del:
                log.warning("warning: expected pod UID %r but got %r from Kube API", uid, actual)
                return None
            raise CNIError(
                INTERNAL,
                f'Multus: [{label}]: expected pod UID "{uid}" but got "{actual}" from Kube API',
            )
        return pod

    async def _wait_then_get(self, namespace: str, name: str, label: str) -> dict[str, Any] | None:
        if self.store.synced.is_set():
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.settings.cache_wait
            pod = await self.store.wait_for(namespace, name, deadline)
            if pod is not None:
                return pod
        # Not in the cache in time (a static pod's mirror, a lagging watch), or no synced
        # cache to wait on: ask the API server once.
        return await self._get(namespace, name, label, is_del=False)

    async def _get(
        self, namespace: str, name: str, label: str, *, is_del: bool
    ) -> dict[str, Any] | None:
        try:
            return await self.client.get(
                pod_path(namespace, name),
                timeout=self.settings.live_get_timeout,
                retries=self.client.settings.max_retries,
            )
        except NotFound:
            log.warning("pod %s/%s not found", namespace, name)
            return None
        except ApiError as exc:
            if is_del:  # DEL never fails for want of the pod: the delegate cache suffices
                log.warning("pod %s/%s: GET failed on DEL: %s", namespace, name, exc)
                return None
            raise CNIError(INTERNAL, f"Multus: [{label}]: error waiting for pod: {exc}") from exc

    async def set_network_status(
        self, namespace: str, name: str, value: str, *, pod: Mapping[str, Any] | None = None
    ) -> bool:
        """One merge PATCH of the annotation on ``pods/status``; ``False`` if the pod is gone.

        A value the API server would refuse for its size, with ``pod``'s other annotations, is
        refused first (:func:`check_status_size`, :class:`AnnotationsTooLarge`), with no request.

        Upstream reads the pod and PUTs it back (two requests, and a conflict loop); a merge
        patch of one annotation needs neither. Throttling (429, or a 5xx with Retry-After) is
        retried inside the client as client-go does; conflicts and the other transient
        failures here, with backoff (Retry-After, when given, as the wait). This is the one
        write an ADD depends on: giving up fails the ADD and makes the runtime tear down and
        re-create the whole sandbox, so it is worth the persistence.
        """
        check_status_size(namespace, name, value, pod)
        body = {"metadata": {"annotations": {NETWORK_STATUS: value}}}
        delay = self.settings.status_backoff
        for attempt in range(1, self.settings.status_attempts + 1):
            try:
                await self.client.patch_pod_status(
                    checked_namespace(namespace),
                    checked_name(name),
                    body,
                    retries=self.client.settings.max_retries,
                )
            except NotFound:
                log.warning("pod %s/%s was deleted before its network status was written",
                            namespace, name)  # fmt: skip
                return False
            except ApiError as exc:
                retry = isinstance(exc, Conflict) or is_transient(exc)
                if not retry or attempt == self.settings.status_attempts:
                    raise CNIError(
                        INTERNAL,
                        f"SetNetworkStatus: failed to update the pod {name} in out of cluster "
                        f"comm: status update failed for pod {namespace}/{name}: {exc}",
                    ) from exc
                wait = exc.retry_after if exc.retry_after is not None else delay
                await asyncio.sleep(wait * (1 + random.random() / 10))
                delay *= 2
            else:
                return True
        return False  # pragma: no cover - the loop always returns or raises
