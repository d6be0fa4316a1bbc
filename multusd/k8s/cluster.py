"""The daemon's view of the cluster: one client, the pod and NAD caches, and their reflectors.

An async context manager owns the reflector tasks and the event recorder's poster: they start
on entry and are cancelled and awaited on exit. A reflector (or the poster) that stops on its
own is a daemon failure, reported through ``on_failure`` so the supervisor can exit non-zero
rather than serve from a frozen cache.

:meth:`Cluster.health` is the cheap view of how the caches stand against the API server
(synced, watching, last contact, failing since when and why), built from what the client
already saw (``multusd.k8s.health``): ``/readyz`` reports it without a request of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from multusd.k8s.apiclient import resource_of
from multusd.k8s.client import ApiConfig, ClientSettings, KubeClient
from multusd.k8s.events import EventRecorder
from multusd.k8s.nads import NADS
from multusd.k8s.reflector.base import ReflectorSettings
from multusd.k8s.reflector.loop import Reflector
from multusd.k8s.store import Store, trim_nad, trim_pod

log = logging.getLogger(__name__)

PODS_PATH = "/api/v1/pods"


@dataclass(frozen=True, slots=True)
class CacheHealth:
    """One cache against the API server, as last seen (times are wall-clock, ``time.time``)."""

    name: str
    synced: bool
    """Its first list has completed (it may be stale since: see the other fields)."""
    objects: int
    watching: bool
    """A watch stream is open now."""
    last_contact: float | None
    """The last list page, watch start or watch event (``None``: never)."""
    failing_since: float | None
    """The first failed list or watch since the last contact; ``None`` while healthy."""
    last_error: str

    @property
    def healthy(self) -> bool:
        return self.synced and self.failing_since is None


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    caches: tuple[CacheHealth, ...]

    @property
    def synced(self) -> bool:
        return all(c.synced for c in self.caches)

    def problems(self) -> list[str]:
        """One phrase per cache that is failing, naming since when and why ([] when fine)."""
        out = []
        for cache in self.caches:
            if cache.failing_since is None:
                continue
            stream = "watching" if cache.watching else "no watch"
            contact = _stamp(cache.last_contact) if cache.last_contact else "never"
            out.append(
                f"{cache.name}: {stream}, failing since {_stamp(cache.failing_since)} "
                f"(last contact {contact}): {cache.last_error}"
            )
        return out


def _stamp(when: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when or 0.0))


@dataclass(frozen=True, slots=True)
class Cluster:
    client: KubeClient
    pods: Store
    nads: Store
    reflectors: tuple[Reflector, ...]
    events: EventRecorder

    def synced(self) -> bool:
        return self.pods.synced.is_set() and self.nads.synced.is_set()

    def health(self) -> ClusterHealth:
        """How each cache stands against the API server now; a few dict reads, no request."""
        caches = []
        for reflector in self.reflectors:
            contact = self.client.contacts.view(resource_of("GET", reflector.path)[1])
            caches.append(
                CacheHealth(
                    name=reflector.name,
                    synced=reflector.store.synced.is_set(),
                    objects=len(reflector.store),
                    watching=contact.watching,
                    last_contact=contact.last_contact,
                    failing_since=contact.failing_since,
                    last_error=contact.last_error,
                )
            )
        return ClusterHealth(tuple(caches))

    async def wait_synced(self, limit: float) -> bool:
        """Wait up to ``limit`` seconds for both caches' first list; ``True`` if they made it."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                await self.pods.synced.wait()
                await self.nads.synced.wait()
        return self.synced()


@contextlib.asynccontextmanager
async def running_cluster(
    config: ApiConfig,
    settings: ClientSettings,
    *,
    node_name: str,
    on_failure: Callable[[str], None],
) -> AsyncIterator[Cluster]:
    """Connect, start the pod (this node's only, when ``node_name`` is set) and NAD caches."""
    async with KubeClient(config, settings) as client:
        pods, nads = Store(), Store()
        # Streaming lists: one object decoded at a time, where kube-apiserver answers a paged
        # first list whole (docs/performance.md, "Relists and memory"); paged lists as the
        # fallback when the server refuses them.
        lists = ReflectorSettings(streaming=True)
        reflectors = (
            Reflector(
                client,
                PODS_PATH,
                pods,
                trim=trim_pod,
                field_selector=f"spec.nodeName={node_name}" if node_name else "",
                settings=lists,
                name="pods",
            ),
            Reflector(
                client,
                NADS.path,
                nads,
                trim=trim_nad,
                settings=lists,
                name="network-attachment-definitions",
            ),
        )
        tasks = [asyncio.create_task(r.run(), name=f"reflector-{r.name}") for r in reflectors]

        def stopped(task: asyncio.Task[None]) -> None:
            if task.cancelled():
                return
            reason = task.exception()
            on_failure(f"{task.get_name()} stopped: {reason!r}")

        for task in tasks:
            task.add_done_callback(stopped)
        try:
            async with EventRecorder(client).running(on_failure=on_failure) as events:
                yield Cluster(client, pods, nads, reflectors, events)
        finally:
            for task in tasks:
                task.remove_done_callback(stopped)
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
