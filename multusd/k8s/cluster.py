"""The daemon's view of the cluster: one client, the pod and NAD caches, and their reflectors.

An async context manager owns the reflector tasks: they start on entry and are cancelled and
awaited on exit. A reflector that stops on its own is a daemon failure, reported through
``on_failure`` so the supervisor can exit non-zero rather than serve from a frozen cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from multusd.k8s.client import ClientSettings, ClusterConfig, KubeClient
from multusd.k8s.events import EventRecorder
from multusd.k8s.reflector import Reflector
from multusd.k8s.store import Store, trim_nad, trim_pod

log = logging.getLogger(__name__)

PODS_PATH = "/api/v1/pods"
NADS_PATH = "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"


@dataclass(frozen=True, slots=True)
class Cluster:
    client: KubeClient
    pods: Store
    nads: Store
    reflectors: tuple[Reflector, ...]
    events: EventRecorder

    def synced(self) -> bool:
        return self.pods.synced.is_set() and self.nads.synced.is_set()

    async def wait_synced(self, limit: float) -> bool:
        """Wait up to ``limit`` seconds for both caches' first list; ``True`` if they made it."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                await self.pods.synced.wait()
                await self.nads.synced.wait()
        return self.synced()


@contextlib.asynccontextmanager
async def running_cluster(
    config: ClusterConfig,
    settings: ClientSettings,
    *,
    node_name: str,
    on_failure: Callable[[str], None],
) -> AsyncIterator[Cluster]:
    """Connect, start the pod (this node's only, when ``node_name`` is set) and NAD caches."""
    async with KubeClient(config, settings) as client:
        pods, nads = Store(), Store()
        reflectors = (
            Reflector(
                client,
                PODS_PATH,
                pods,
                trim=trim_pod,
                field_selector=f"spec.nodeName={node_name}" if node_name else "",
                name="pods",
            ),
            Reflector(
                client, NADS_PATH, nads, trim=trim_nad, name="network-attachment-definitions"
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
            async with EventRecorder(client).running() as events:
                yield Cluster(client, pods, nads, reflectors, events)
        finally:
            for task in tasks:
                task.remove_done_callback(stopped)
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
