"""Devices allocated to a pod by device plugins, for NADs with ``k8s.v1.cni.cncf.io/resourceName``.

Upstream (``pkg/kubeletclient``, ``pkg/checkpoint``) asks the kubelet's pod-resources gRPC
service (``v1.PodResourcesLister/List``) which devices each pod got and, when that socket does
not exist, reads the device manager's checkpoint file instead. Each NAD naming a resource then
takes the next unused device ID of that resource, in sorted order, so that the plugins of one
pod see a stable device-to-interface assignment.

This module is that choice and the map; the two sources each have their own module:
``multusd.k8s.podresources`` (the gRPC client) and ``multusd.k8s.checkpoint`` (the file). The
device-info files a delegate gets are ``multusd.k8s.devinfo``.

Where upstream would fail because *neither* source exists (no kubelet socket and no checkpoint)
we return an empty map instead: a node without device plugins simply has no devices to give
(docs/compatibility.md).

The second half of upstream's map is DRA: the devices of the pod's ``resource.k8s.io``
claims are appended to the kubelet's before the map is sorted (``multusd.k8s.dra``), for a pod
with claims only, through the daemon's API client.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, TypeVar

from cni_shim.errors import INVALID_ENVIRONMENT, CNIError
from multusd.k8s import checkpoint, dra, podresources

__all__ = ["DeviceMap", "device_map_for_pod_object", "kubelet_devices"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_CLIENT_PREFIX = "getKubernetesDelegate: failed to get a ResourceClient instance: "
_MAP_PREFIX = "getKubernetesDelegate: failed to get resourceMap from ResourceClient: "


class DeviceMap:
    """Resource name -> sorted device IDs of one pod, each with a cursor.

    One map serves all delegates of one ADD, so two NADs naming the same resource get two
    different devices. Asking for an unknown or exhausted resource gives ``""``, not an error,
    exactly as upstream: the delegate then simply runs without a ``deviceID``.
    """

    __slots__ = ("_cursor", "_devices")

    def __init__(self, devices: Mapping[str, Iterable[str]] | None = None) -> None:
        # Python orders str by code point, which for valid UTF-8 is Go's byte order (sort.Strings).
        self._devices = {name: tuple(sorted(ids)) for name, ids in (devices or {}).items()}
        self._cursor = dict.fromkeys(self._devices, 0)

    def next_device(self, resource_name: str) -> str:
        ids = self._devices.get(resource_name, ())
        index = self._cursor.get(resource_name, 0)
        if index >= len(ids):
            return ""
        self._cursor[resource_name] = index + 1
        return ids[index]

    def devices(self, resource_name: str) -> tuple[str, ...]:
        """All device IDs of a resource (sorted), regardless of the cursor."""
        return self._devices.get(resource_name, ())

    @property
    def resources(self) -> dict[str, tuple[str, ...]]:
        return dict(self._devices)

    def __len__(self) -> int:
        return len(self._devices)

    def __repr__(self) -> str:
        return f"DeviceMap({self._devices!r})"


async def kubelet_devices(
    namespace: str,
    name: str,
    uid: str,
    *,
    socket_path: str = podresources.KUBELET_SOCKET,
    checkpoint_path: str = checkpoint.CHECKPOINT_PATH,
    timeout: float = 10.0,  # noqa: ASYNC109 - a gRPC deadline, sent to the kubelet too
) -> dict[str, list[str]]:
    """Resource name -> device IDs (unsorted) the kubelet allocated to pod ``namespace/name``
    (UID ``uid``), kept apart from the map so that DRA's devices can join them before it sorts.

    The kubelet socket is preferred whenever it exists (even if nothing listens on it, as
    upstream: ``os.Stat`` decides); the checkpoint file matches by pod UID, the socket by name.
    Failures raise ``CNIError`` with upstream's message chain.
    """
    if await asyncio.to_thread(os.path.exists, socket_path):
        listing = podresources.list_pod_resources(socket_path, timeout)
        reply, client_repr = await _resource_client(listing)
        if not name or not namespace:
            raise CNIError(
                INVALID_ENVIRONMENT,
                _MAP_PREFIX + "GetPodResourceMap: Pod name or namespace cannot be empty",
            )
        # Go fails while unmarshalling inside List, so a malformed reply is a client failure.
        decoding = asyncio.to_thread(podresources.pod_devices, reply, client_repr, namespace, name)
        return await _resource_client(decoding)

    entries = await _resource_client(checkpoint.read_checkpoint(checkpoint_path))
    if entries is None:
        log.debug("no kubelet socket %s and no checkpoint %s", socket_path, checkpoint_path)
        return {}
    if not uid:
        raise CNIError(
            INVALID_ENVIRONMENT, _MAP_PREFIX + "GetPodResourceMap: invalid Pod cannot be empty"
        )
    return checkpoint.pod_devices(entries, uid)


async def _resource_client(step: Awaitable[T]) -> T:
    """Upstream builds its resource client (the kubelet's ``List``, or the checkpoint read) in
    ``GetResourceClient``, and ``getKubernetesDelegate`` puts one prefix in front of whatever
    that fails with: the sources raise their own part of the chain, the prefix is added here."""
    try:
        return await step
    except CNIError as exc:
        raise exc.with_prefix(_CLIENT_PREFIX) from exc


async def device_map_for_pod_object(
    pod: Mapping[str, Any], *, claims: dra.ClaimsApi | None = None, **kwargs: Any
) -> DeviceMap:
    """The pod's whole device map, as upstream's ``getKubernetesDelegate`` builds it: the
    kubelet's devices (``kubelet_devices``, ``kwargs`` its options; ``metadata`` read), then,
    when ``claims`` is given and the pod has DRA claims, theirs (``dra.add_claimed_devices``,
    within its 20 s), sorted together. A pod without claims costs no API request."""
    meta = pod.get("metadata") or {}
    devices = await kubelet_devices(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        **kwargs,
    )
    if claims is not None and dra.has_claims(pod):
        await dra.add_claimed_devices(claims, pod, devices)
    return DeviceMap(devices)
