"""The watch cache: the objects one reflector keeps, and waiting for one of them to show up.

A CNI ADD often arrives before the pod's watch event does, so readers need "wait until this pod
is here, or give up at a deadline". Upstream polls its informer every 50 ms for that; here each
waiting key holds futures that the write which brings the object resolves, so a waiter costs
nothing while it waits and wakes on the very event.

Memory is upstream's most reported problem (an informer holding every full pod), so the store
only ever holds trimmed objects: ``trim_pod`` and ``trim_nad`` keep what the daemon reads and
drop the rest (specs, status but a pod's DRA claim names, managedFields), and annotation keys,
which repeat across pods, are interned. Objects handed out are the stored dicts themselves:
callers must not change them.

Everything here is synchronous except ``wait_for``, and runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"

_POD_METADATA = ("name", "namespace", "uid", "resourceVersion")


def object_key(namespace: str, name: str) -> str:
    """The store key: ``namespace/name``, or ``name`` for cluster-scoped objects."""
    return f"{namespace}/{name}" if namespace else name


def key_of(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return object_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def resource_version_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _trim_metadata(meta: Obj) -> Obj:
    kept: Obj = {k: meta[k] for k in _POD_METADATA if k in meta}
    annotations = meta.get("annotations")
    if annotations:
        kept["annotations"] = {sys.intern(str(k)): v for k, v in annotations.items()}
    return kept


def trim_pod(obj: Obj) -> Obj:
    """What the daemon reads from a pod: identity, version, annotations, the node, and the
    names of its DRA claims (``multusd.k8s.dra``; ``status`` only when it has some).

    List items carry no apiVersion/kind on a real apiserver, so both are filled in here and
    every cached pod looks the same whether it came from a list or a watch event.
    """
    trimmed: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _trim_metadata(obj.get("metadata") or {}),
    }
    node = (obj.get("spec") or {}).get("nodeName")
    trimmed["spec"] = {"nodeName": node} if node else {}
    status = obj.get("status")
    if isinstance(status, dict) and (claims := trim_claim_statuses(status)):
        trimmed["status"] = claims
    return trimmed


def trim_claim_statuses(status: Obj) -> Obj:
    """A pod status' DRA claims, in the shape ``multusd.k8s.kproto`` decodes them to:
    ``resourceClaimStatuses`` (``name``; ``resourceClaimName`` when set, a pointer in Go) and
    ``extendedResourceClaimStatus`` (its claim, and each mapping's request and resource name).
    Empty when the pod has neither: most pods, whose cached form then has no ``status``."""
    kept: Obj = {}
    claims = [
        {"name": str(c.get("name") or "")}
        | (
            {}
            if c.get("resourceClaimName") is None
            else {"resourceClaimName": str(c["resourceClaimName"])}
        )
        for c in status.get("resourceClaimStatuses") or ()
        if isinstance(c, dict)
    ]
    if claims:
        kept["resourceClaimStatuses"] = claims
    extended = status.get("extendedResourceClaimStatus")
    if isinstance(extended, dict):
        kept["extendedResourceClaimStatus"] = {
            "requestMappings": [
                {
                    "requestName": str(m.get("requestName") or ""),
                    "resourceName": str(m.get("resourceName") or ""),
                }
                for m in extended.get("requestMappings") or ()
                if isinstance(m, dict)
            ],
            "resourceClaimName": str(extended.get("resourceClaimName") or ""),
        }
    return kept


def trim_nad(obj: Obj) -> Obj:
    """What the daemon reads from a NetworkAttachmentDefinition: its annotations
    (``resourceName``) and ``spec.config``."""
    trimmed: Obj = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": _trim_metadata(obj.get("metadata") or {}),
    }
    config = (obj.get("spec") or {}).get("config")
    trimmed["spec"] = {"config": config} if config is not None else {}
    return trimmed


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    size: int
    synced: bool
    relists: int  # complete (re)lists applied with ``replace``, the first one included
    events: int  # watch events applied (bookmarks not counted)
    last_resource_version: str
    waiters: int  # coroutines currently in ``wait_for``


class Store:
    """Objects keyed ``namespace/name``; filled by a reflector, read by request handlers."""

    def __init__(self) -> None:
        self.synced = asyncio.Event()
        self._objects: dict[str, Obj] = {}
        self._waiters: dict[str, set[asyncio.Future[Obj]]] = {}
        self._relists = 0
        self._events = 0
        self._rv = ""

    # --- reads -----------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj | None:
        return self._objects.get(object_key(namespace, name))

    def items(self) -> list[Obj]:
        return list(self._objects.values())

    def __len__(self) -> int:
        return len(self._objects)

    @property
    def resource_version(self) -> str:
        """The version of the last list, event or bookmark applied ("" before the first)."""
        return self._rv

    async def wait_for(self, namespace: str, name: str, deadline: float) -> Obj | None:
        """The object as soon as it is present; ``None`` once ``loop.time()`` reaches
        ``deadline``. Returns at once when it is already here (or the deadline has passed)."""
        key = object_key(namespace, name)
        found = self._objects.get(key)
        if found is not None:
            return found
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline:
            return None
        future: asyncio.Future[Obj] = loop.create_future()
        self._waiters.setdefault(key, set()).add(future)
        try:
            async with asyncio.timeout_at(deadline):
                return await future
        except TimeoutError:
            # The object may have landed in the same loop iteration the deadline fired.
            return self._objects.get(key)
        finally:
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(future)
                if not waiting:
                    del self._waiters[key]

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            size=len(self._objects),
            synced=self.synced.is_set(),
            relists=self._relists,
            events=self._events,
            last_resource_version=self._rv,
            waiters=sum(len(w) for w in self._waiters.values()),
        )

    # --- writes (from the reflector) -------------------------------------------------------

    def replace(self, objects: Iterable[Obj], resource_version: str) -> None:
        """Make the store exactly what a (re)list returned: objects that vanished while the
        watch was down go, new ones wake their waiters. Marks the store synced."""
        fresh = {key_of(obj): obj for obj in objects}
        self._objects = fresh
        self._rv = resource_version
        self._relists += 1
        for key in [k for k in self._waiters if k in fresh]:
            self._wake(key, fresh[key])
        self.synced.set()

    def apply(self, event_type: str, obj: Obj) -> None:
        """Apply one watch event. ``BOOKMARK`` only moves the resource version; an unknown
        type is ignored (the reflector logs it)."""
        rv = resource_version_of(obj)
        if event_type == BOOKMARK:
            if rv:
                self._rv = rv
            return
        key = key_of(obj)
        if event_type in (ADDED, MODIFIED):
            self._objects[key] = obj
            if key in self._waiters:
                self._wake(key, obj)
        elif event_type == DELETED:
            self._objects.pop(key, None)
        else:
            return
        self._events += 1
        if rv:
            self._rv = rv

    def _wake(self, key: str, obj: Obj) -> None:
        for future in self._waiters.pop(key, ()):
            if not future.done():
                future.set_result(obj)
