"""A NetworkAttachmentDefinition as a delegate: the NAD looked up, its config, its device.

Upstream ``getKubernetesDelegate``: the NAD comes from the cache (one GET on a miss); its
``spec.config`` is the delegate (a missing ``name`` set to the NAD's), or, when empty, the CNI
config of that name in ``confDir``; a ``resourceName`` annotation gets the device the kubelet
allocated; then the selection element's requests (interface, MAC, IPs, default route, ...)
are applied. A missing NAD is a ``NoNetworkFound`` event and an error.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from cni_shim import gojson
from cni_shim.errors import CNIError
from multusd.k8s.errors import ApiError
from multusd.k8s.events import EventRecorder
from multusd.k8s.nads import NadLookup
from multusd.networks.delegates import (
    Delegate,
    delegate_from_bytes,
    invalid_config,
    with_cni_args,
    with_device,
)
from multusd.networks.netconf import NetConf
from multusd.networks.ondisk import config_files, find_in
from multusd.networks.selection import SelectionElement

RESOURCE_NAME_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"


class DeviceSource(Protocol):
    def next_device(self, resource_name: str) -> str: ...


@dataclass
class KubeNetworks:
    """What resolving NAD-backed networks needs from Kubernetes."""

    nads: NadLookup
    events: EventRecorder | None = None
    devices: Callable[[dict[str, Any]], Awaitable[DeviceSource]] | None = None
    """Builds a pod's device map (kubelet pod-resources); called at most once per ADD."""


@dataclass
class PerPod:
    """State shared by every delegate of one ADD: the device map is built once, lazily."""

    kube: KubeNetworks
    pod: dict[str, Any] | None
    _devices: DeviceSource | None = field(default=None, init=False)

    async def device(self, resource_name: str) -> str:
        if self.kube.devices is None or self.pod is None:
            return ""
        if self._devices is None:
            self._devices = await self.kube.devices(self.pod)
        return self._devices.next_device(resource_name)


async def _config_from_file(conf_dir: str, nad_name: str) -> bytes:
    """A NAD without ``spec.config``: the CNI config named like the NAD, from ``confDir``."""
    prefix = "GetCNIConfig: err in GetCNIConfigFromFile: "
    try:
        files = await config_files(Path(conf_dir))
    except (FileNotFoundError, NotADirectoryError):
        files = []
    if not files:
        raise invalid_config(f"{prefix}No networks found in {conf_dir}")
    try:
        found = await find_in(files, nad_name)
    except CNIError as exc:
        raise exc.with_prefix(prefix) from exc
    if found is None:
        raise invalid_config(
            f"{prefix}no network available in the name {nad_name} in cni dir {conf_dir}"
        )
    return found.raw


def _config_from_spec(nad: dict[str, Any], nad_name: str) -> bytes:
    text = (nad.get("spec") or {}).get("config") or ""
    try:
        conf = json.loads(text)
        if not isinstance(conf, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise invalid_config(
            f"GetCNIConfig: err in getCNIConfigFromSpec: failed to unmarshal Spec.Config: {exc}"
        ) from exc
    if conf.get("name"):
        return str(text).encode()
    conf["name"] = nad_name
    return gojson.dumps(conf, sort_keys=True).encode()


def apply_selection(
    delegate: Delegate, element: SelectionElement, device_id: str, resource_name: str
) -> Delegate:
    """Upstream ``LoadDelegateNetConf`` with a selection element
    (docs/upstream.md, "Delegates from config bytes")."""
    device = device_id or element.device_id
    if device:
        delegate = with_device(delegate, device, resource_name if device_id else "")
    if element.cni_args is not None:
        delegate = with_cni_args(delegate, element.cni_args)
    gateways = delegate.gateway_request
    if element.default_route is not None:
        gateways = (*(gateways or ()), *element.default_route)
    return replace(
        delegate,
        name=f"{element.namespace}/{element.name}" if element.name else delegate.name,
        ifname_request=element.interface or delegate.ifname_request,
        mac_request=element.mac,
        ip_request=element.ips,
        infiniband_guid_request=element.infiniband_guid,
        gateway_request=gateways,
        port_mappings_request=(
            None
            if element.port_mappings is None
            else tuple(p for p in element.port_mappings if p is not None)
        ),
        bandwidth_request=element.bandwidth,
    )


async def nad_delegate(
    per_pod: PerPod,
    element: SelectionElement,
    netconf: NetConf,
) -> Delegate:
    """Upstream ``getKubernetesDelegate`` (docs/upstream.md, "NAD to delegate", steps 2–5)
    for one selection element."""
    kube = per_pod.kube
    try:
        nad = await kube.nads.get(element.namespace, element.name)
        reason = f'networkattachmentdefinition.k8s.cni.cncf.io "{element.name}" not found'
    except ApiError as exc:
        nad, reason = None, str(exc)
    if nad is None:
        message = (
            f"cannot find a network-attachment-definition ({element.name}) in namespace "
            f"({element.namespace}): {reason}"
        )
        if kube.events is not None and per_pod.pod is not None:
            kube.events.record(per_pod.pod, "Warning", "NoNetworkFound", message)
        raise invalid_config(f"getKubernetesDelegate: {message}")
    resource_name = (nad.get("metadata", {}).get("annotations") or {}).get(
        RESOURCE_NAME_ANNOTATION, ""
    )
    device_id = await per_pod.device(resource_name) if resource_name else ""
    if (nad.get("spec") or {}).get("config"):
        raw = _config_from_spec(nad, element.name)
    else:
        raw = await _config_from_file(netconf.conf_dir, element.name)
    return apply_selection(delegate_from_bytes(raw), element, device_id, resource_name)
