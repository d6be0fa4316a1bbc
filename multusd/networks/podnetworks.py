"""Delegates from Kubernetes: NAD-backed cluster and default networks, and the pod's annotations.

The order and every error text follow upstream (reference §6.5, §6.6): the cluster network
first (a NAD in ``multusNamespace``, else a CNI config of that name in ``confDir``, or a path),
then ``defaultNetworks`` unless the pod is in a system namespace, then the pod's
``v1.multus-cni.io/default-network`` override (replacing the first), then each element of
``k8s.v1.cni.cncf.io/networks`` in annotation order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from cni_shim import gojson
from cni_shim.errors import INVALID_NETWORK_CONFIG, CNIError
from multusd.k8s.errors import ApiError
from multusd.k8s.events import EventRecorder
from multusd.k8s.nads import NadLookup
from multusd.networks.delegates import (
    Delegate,
    delegate_from_bytes,
    find_by_name,
    resolve_on_disk,
    with_cni_args,
    with_device,
)
from multusd.networks.gateways import plan_gateways
from multusd.networks.netconf import NetConf
from multusd.networks.selection import (
    SelectionElement,
    parse_default_network_annotation,
    parse_network_annotation,
)

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
DEFAULT_NETWORK_ANNOTATION = "v1.multus-cni.io/default-network"
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
class _PerPod:
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


def _annotations(pod: dict[str, Any] | None) -> dict[str, str]:
    if pod is None:
        return {}
    value = pod.get("metadata", {}).get("annotations") or {}
    return value if isinstance(value, dict) else {}


def _invalid(msg: str) -> CNIError:
    return CNIError(INVALID_NETWORK_CONFIG, msg)


def _config_from_file(conf_dir: str, nad_name: str) -> bytes:
    """A NAD without ``spec.config``: the CNI config named like the NAD, from ``confDir``."""
    prefix = "GetCNIConfig: err in GetCNIConfigFromFile: "
    directory = Path(conf_dir)
    try:
        if not any(p.suffix in (".conf", ".json", ".conflist") for p in directory.iterdir()):
            raise FileNotFoundError(conf_dir)
    except (FileNotFoundError, NotADirectoryError):
        raise _invalid(f"{prefix}No networks found in {conf_dir}") from None
    try:
        found = find_by_name(directory, nad_name)
    except CNIError as exc:
        raise exc.with_prefix(prefix) from exc
    if found is None:
        raise _invalid(f"{prefix}no network available in the name {nad_name} in cni dir {conf_dir}")
    return found.raw


def _config_from_spec(nad: dict[str, Any], nad_name: str) -> bytes:
    text = (nad.get("spec") or {}).get("config") or ""
    try:
        conf = json.loads(text)
        if not isinstance(conf, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise _invalid(
            f"GetCNIConfig: err in getCNIConfigFromSpec: failed to unmarshal Spec.Config: {exc}"
        ) from exc
    if conf.get("name"):
        return str(text).encode()
    conf["name"] = nad_name
    return gojson.dumps(conf, sort_keys=True).encode()


def apply_selection(
    delegate: Delegate, element: SelectionElement, device_id: str, resource_name: str
) -> Delegate:
    """Upstream ``LoadDelegateNetConf`` with a selection element (reference §6.6.4)."""
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
    per_pod: _PerPod,
    element: SelectionElement,
    netconf: NetConf,
) -> Delegate:
    """Upstream ``getKubernetesDelegate`` (§6.6.3 steps 2–5) for one selection element."""
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
        raise _invalid(f"getKubernetesDelegate: {message}")
    resource_name = (nad.get("metadata", {}).get("annotations") or {}).get(
        RESOURCE_NAME_ANNOTATION, ""
    )
    device_id = await per_pod.device(resource_name) if resource_name else ""
    if (nad.get("spec") or {}).get("config"):
        raw = _config_from_spec(nad, element.name)
    else:
        raw = await asyncio.to_thread(_config_from_file, netconf.conf_dir, element.name)
    return apply_selection(delegate_from_bytes(raw), element, device_id, resource_name)


async def named_network(per_pod: _PerPod, name: str, netconf: NetConf) -> Delegate:
    """Upstream ``getNetDelegate``: a cluster/default network given by name or path (§6.5)."""
    if "/" in name:
        return await asyncio.to_thread(resolve_on_disk, name, netconf.conf_dir)
    element = SelectionElement(name=name, namespace=netconf.multus_namespace)
    try:
        return await nad_delegate(per_pod, element, netconf)
    except CNIError:
        pass  # upstream falls back to a CNI config of that name in confDir
    found = await asyncio.to_thread(find_by_name, Path(netconf.conf_dir), name)
    if found is None:
        raise _invalid(f"getNetDelegate: cannot find network: {name}")
    return found


def cluster_network_error(netconf: NetConf, exc: CNIError) -> CNIError:
    """Upstream replaces the reason a cluster network failed with a fixed text (kept), the
    reason moves to the details."""
    return CNIError(
        exc.code,
        f"GetDefaultNetworks: failed to get clusterNetwork {netconf.cluster_network} "
        f"in namespace {netconf.multus_namespace}",
        str(exc),
    )


async def default_networks(
    per_pod: _PerPod, netconf: NetConf, pod: dict[str, Any] | None
) -> list[Delegate]:
    """``GetDefaultNetworks``: the cluster network (master), then ``defaultNetworks``."""
    try:
        master = await named_network(per_pod, netconf.cluster_network, netconf)
    except CNIError as exc:
        raise cluster_network_error(netconf, exc) from exc
    delegates = [master.as_master()]
    namespace = (pod or {}).get("metadata", {}).get("namespace", "")
    if pod is not None and namespace not in netconf.system_namespaces:
        for name in netconf.default_networks:
            delegates.append(await named_network(per_pod, name, netconf))
    return delegates


async def pod_delegates(
    per_pod: _PerPod, netconf: NetConf, pod: dict[str, Any], delegates: list[Delegate]
) -> list[Delegate]:
    """``TryLoadPodDelegates``: the default-network override, then the selected networks."""
    annotations = _annotations(pod)
    pod_namespace = pod.get("metadata", {}).get("namespace", "")
    if DEFAULT_NETWORK_ANNOTATION in annotations:
        prefix = (
            "TryLoadPodDelegates: error in loading K8s cluster default network from pod "
            "annotation: "
        )
        try:
            element = parse_default_network_annotation(
                annotations[DEFAULT_NETWORK_ANNOTATION], netconf.multus_namespace
            )
        except CNIError as exc:
            raise exc.with_prefix(prefix) from exc
        try:
            override = await nad_delegate(per_pod, element, netconf)
        except CNIError as exc:
            raise exc.with_prefix(
                prefix + "tryLoadK8sPodDefaultNetwork: failed getting the delegate: "
            ) from exc
        delegates = [override.as_master(), *delegates[1:]]  # replaces the cluster network
    value = annotations.get(NETWORKS_ANNOTATION, "")
    if not value:  # absent or empty: no networks, not an error (upstream GetPodNetwork)
        return delegates
    elements = parse_network_annotation(value, pod_namespace)
    extra: list[Delegate] = []
    globals_ = netconf.global_namespace_list
    for element in elements:
        try:
            if (
                netconf.namespace_isolation
                and element.namespace != pod_namespace
                and element.namespace not in globals_
            ):
                raise _invalid(
                    "GetNetworkDelegates: namespace isolation enabled, annotation violates "
                    f"permission, pod is in namespace {pod_namespace} but refers to target "
                    f"namespace {element.namespace}"
                )
            try:
                extra.append(await nad_delegate(per_pod, element, netconf))
            except CNIError as exc:
                raise exc.with_prefix("GetNetworkDelegates: failed getting the delegate: ") from exc
        except CNIError as exc:
            raise exc.with_prefix(
                "TryLoadPodDelegates: error in getting k8s network for pod: "
            ) from exc
    # The ECMP check and the per-delegate route filters, when any default-route was asked for.
    return plan_gateways([*delegates, *extra])


async def cluster_delegates(
    netconf: NetConf, pod: dict[str, Any] | None, kube: KubeNetworks
) -> list[Delegate]:
    """``GetDefaultNetworks`` in Kubernetes mode: NAD-backed or file cluster network first."""
    return await default_networks(_PerPod(kube, pod), netconf, pod)


async def with_pod_delegates(
    netconf: NetConf, pod: dict[str, Any], kube: KubeNetworks, delegates: list[Delegate]
) -> list[Delegate]:
    """``TryLoadPodDelegates``: the pod's override and selections on top of ``delegates``."""
    return await pod_delegates(_PerPod(kube, pod), netconf, pod, delegates)
