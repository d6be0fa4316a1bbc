"""Kubernetes Events (``AddedInterface``, ``NoNetworkFound``), sent off the request's path.

Upstream records an event per added interface through client-go's broadcaster, which queues
them and posts in the background. A CNI ADD must not wait for an event, nor fail because of
one: ``record`` only enqueues; one owned task posts them through the same token bucket as
everything else, in its background class, so an event never takes a token a pod read or a
network-status write is waiting for. The queue is bounded; when full, new events are dropped
and counted (an event is advisory).

Who owns the poster, and what ends it: the task is created by :meth:`EventRecorder.running`,
a context manager the cluster (and so the supervisor) enters, which cancels and awaits it on
exit. Any error while posting one event, an API error or anything else (a bug building the
request, an object that does not serialize), is logged and counted as ``failed``, and the
loop goes on with the next event. We chose that over "the daemon exits" on purpose: an event
is advisory, so one bad event must neither silence every later one (the old behaviour: the
task died unnoticed) nor restart the daemon, which would fail the ADDs in flight on the node.
Should the task still end on its own, ``on_failure`` is told and the supervisor exits
non-zero: no zombie recorder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from multusd.k8s.client import KubeClient
from multusd.k8s.errors import ApiError
from multusd.k8s.names import checked_namespace

log = logging.getLogger(__name__)

EVENTS_DRAIN = 2.0
"""At shutdown, how long the queued events may take to be posted (docs/operations.md)."""

COMPONENT = "multus"


@dataclass
class EventStatistics:
    queued: int = 0
    posted: int = 0
    failed: int = 0
    dropped: int = 0


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def object_event(
    obj: dict[str, Any],
    kind: tuple[str, str],
    event_type: str,
    reason: str,
    message: str,
    *,
    component: str = COMPONENT,
) -> dict[str, Any]:
    """A core/v1 Event about ``obj`` (``kind``: its apiVersion and kind), shaped as client-go's
    recorder makes them: in the object's namespace, or ``default`` for a cluster-scoped one."""
    meta = obj.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), meta.get("namespace")
    involved = {"apiVersion": kind[0], "kind": kind[1]}
    if namespace is not None:
        involved["namespace"] = namespace
    stamp = _now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace or "default"},
        "involvedObject": {
            **involved,
            "name": name,
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "type": event_type,
    }


def pod_event(pod: dict[str, Any], event_type: str, reason: str, message: str) -> dict[str, Any]:
    """A core/v1 Event about ``pod`` (a pod without a namespace is ``default``'s)."""
    meta = {"namespace": "default", **(pod.get("metadata") or {})}
    return object_event({**pod, "metadata": meta}, ("v1", "Pod"), event_type, reason, message)


class EventRecorder:
    """Queue events now, post them later, in order, from one task this recorder owns."""

    def __init__(self, client: KubeClient, *, capacity: int = 1024) -> None:
        self._client = client
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(capacity)
        self.stats = EventStatistics()
        self._unexpected: set[type[BaseException]] = set()

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
            try:
                await self._post(event)
            finally:
                self._queue.task_done()

    async def _post(self, event: dict[str, Any]) -> None:
        """Post one event; every failure is counted and logged, none leaves this method."""
        try:
            namespace = checked_namespace(event["metadata"]["namespace"])
            await self._client.create_event(
                namespace, event, retries=self._client.settings.max_retries
            )
        except ApiError as exc:
            self.stats.failed += 1
            log.debug("event %s for %s not recorded: %s", event.get("reason"),
                      event.get("involvedObject", {}).get("name"), exc)  # fmt: skip
        except Exception as exc:
            self.stats.failed += 1
            # The traceback once per kind of error (it is a bug worth reporting), then one line.
            first = type(exc) not in self._unexpected
            self._unexpected.add(type(exc))
            log.error("event %s for %s not recorded (unexpected error): %r", event.get("reason"),
                      event.get("involvedObject", {}).get("name"), exc,
                      exc_info=first)  # fmt: skip
        else:
            self.stats.posted += 1

    async def wait_idle(self) -> None:
        """Until every queued event was posted or given up on (tests, shutdown)."""
        await self._queue.join()

    @contextlib.asynccontextmanager
    async def running(
        self, drain: float = EVENTS_DRAIN, on_failure: Callable[[str], None] | None = None
    ) -> AsyncIterator[EventRecorder]:
        """Post events while the context is open; on exit give the queue ``drain`` seconds.

        ``on_failure`` is told if the poster ends while the context is still open (it should
        not: see the module docstring).
        """
        task = asyncio.create_task(self._post_forever(), name="event-recorder")

        def ended(done: asyncio.Task[None]) -> None:
            if done.cancelled():
                return
            reason = f"{done.get_name()} stopped: {done.exception()!r}"
            log.error("%s", reason)
            if on_failure is not None:
                on_failure(reason)

        task.add_done_callback(ended)
        try:
            yield self
        finally:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(drain):
                    await self.wait_idle()
            task.remove_done_callback(ended)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def added_interface_message(ifname: str, ips: list[str], network: str) -> str:
    """``Add <ifname> [<cidr> <cidr>...] from <network>`` (upstream's text, Go slice format)."""
    text = f"Add {ifname} [{' '.join(ips)}]"
    return f"{text} from {network}" if network else text
