"""Kubernetes Events (``AddedInterface``, ``NoNetworkFound``), sent off the request's path.

Upstream records an event per added interface through client-go's broadcaster, which queues
them and posts in the background. A CNI ADD must not wait for an event, nor fail because of
one: ``record`` only enqueues; one owned task posts them through the same token bucket as
everything else, so events yield to nothing but also never starve pod reads. The queue is
bounded; when full, new events are dropped and counted (an event is advisory).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from multusd.k8s.client import KubeClient
from multusd.k8s.errors import ApiError

log = logging.getLogger(__name__)

COMPONENT = "multus"


@dataclass
class EventStatistics:
    queued: int = 0
    posted: int = 0
    failed: int = 0
    dropped: int = 0


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def pod_event(pod: dict[str, Any], event_type: str, reason: str, message: str) -> dict[str, Any]:
    """A core/v1 Event about ``pod``, shaped as client-go's recorder makes them."""
    meta = pod.get("metadata", {})
    namespace, name = meta.get("namespace", "default"), meta.get("name", "")
    stamp = _now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": namespace,
            "name": name,
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "source": {"component": COMPONENT},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "type": event_type,
    }


class EventRecorder:
    """Queue events now, post them later, in order, from one task this recorder owns."""

    def __init__(self, client: KubeClient, *, capacity: int = 1024) -> None:
        self._client = client
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(capacity)
        self.stats = EventStatistics()

    def record(self, pod: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Enqueue an event; never blocks, never raises."""
        try:
            self._queue.put_nowait(pod_event(pod, event_type, reason, message))
        except asyncio.QueueFull:
            self.stats.dropped += 1
            return
        self.stats.queued += 1

    async def _post_forever(self) -> None:
        while True:
            event = await self._queue.get()
            namespace = event["metadata"]["namespace"]
            try:
                await self._client.post(f"/api/v1/namespaces/{namespace}/events", event)
            except ApiError as exc:
                self.stats.failed += 1
                log.debug("event %s for %s not recorded: %s", event["reason"],
                          event["involvedObject"]["name"], exc)  # fmt: skip
            else:
                self.stats.posted += 1
            finally:
                self._queue.task_done()

    async def wait_idle(self) -> None:
        """Until every queued event was posted or given up on (tests, shutdown)."""
        await self._queue.join()

    @contextlib.asynccontextmanager
    async def running(self, drain: float = 2.0) -> AsyncIterator[EventRecorder]:
        """Post events while the context is open; on exit give the queue ``drain`` seconds."""
        task = asyncio.create_task(self._post_forever(), name="event-recorder")
        try:
            yield self
        finally:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(drain):
                    await self.wait_idle()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def added_interface_message(ifname: str, ips: list[str], network: str) -> str:
    """``Add <ifname> [<cidr> <cidr>...] from <network>`` (upstream's text, Go slice format)."""
    text = f"Add {ifname} [{' '.join(ips)}]"
    return f"{text} from {network}" if network else text
