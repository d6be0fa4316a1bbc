"""The pod's own networks, from its annotations, on top of the cluster and default networks.

Upstream ``TryLoadPodDelegates``: the pod's ``v1.multus-cni.io/default-network`` override
replaces the first delegate (the cluster network), then each element of
``k8s.v1.cni.cncf.io/networks`` is added in annotation order (each a NAD, subject to
``namespaceIsolation``), and the default-route plan is made over the whole list. The order and
every error text are upstream's.
"""

from __future__ import annotations

from typing import Any

from cni_shim.errors import CNIError
from multusd.networks.delegates import Delegate, invalid_config
from multusd.networks.gateways import plan_gateways
from multusd.networks.nad_delegates import KubeNetworks, PerPod, nad_delegate
from multusd.networks.netconf import NetConf
from multusd.networks.selection import (
    parse_default_network_annotation,
    parse_network_annotation,
)

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
DEFAULT_NETWORK_ANNOTATION = "v1.multus-cni.io/default-network"


def _annotations(pod: dict[str, Any] | None) -> dict[str, str]:
    if pod is None:
        return {}
    value = pod.get("metadata", {}).get("annotations") or {}
    return value if isinstance(value, dict) else {}


async def with_pod_networks(
    netconf: NetConf,
    pod: dict[str, Any] | None,
    kube: KubeNetworks | None,
    delegates: list[Delegate],
) -> list[Delegate]:
    """The pod's default-network override and network selections (Kubernetes mode only)."""
    if kube is None or pod is None:
        return delegates
    return await pod_delegates(PerPod(kube, pod), netconf, pod, delegates)


async def pod_delegates(
    per_pod: PerPod, netconf: NetConf, pod: dict[str, Any], delegates: list[Delegate]
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
    elements = parse_network_annotation(value, pod_namespace, limit=netconf.max_networks_per_pod)
    extra: list[Delegate] = []
    globals_ = netconf.global_namespace_list
    for element in elements:
        try:
            if (
                netconf.namespace_isolation
                and element.namespace != pod_namespace
                and element.namespace not in globals_
            ):
                raise invalid_config(
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
