"""Which delegates a request gets, in execution order: the one entry point.

Every command asks here: ADD, DEL and CHECK through :func:`delegates_for`, the hot-plug API
(one delegate, described by the request) through :func:`hotplug_delegate`, GC and STATUS (the
cluster network alone) through :func:`cluster_network_list`. The rules for each verb are in
:func:`delegates_for`; the pieces behind it are named for what they resolve:

* :mod:`multusd.networks.cluster_network`: the cluster network (the master), or the config's
  inline ``delegates``, then ``defaultNetworks``;
* :mod:`multusd.networks.podnetworks`: the pod's own networks, from its annotations;
* :mod:`multusd.networks.nad_delegates`: one NetworkAttachmentDefinition as a delegate;
* :mod:`multusd.networks.ondisk`: a config file, conflist, directory or ``confDir`` name;
* :mod:`multusd.networks.chains`: sub-directory plugins, and the auxiliary CNI chain;
* :mod:`multusd.networks.delegates`: the ``Delegate`` value itself.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Literal

from cni_shim.errors import INVALID_ENVIRONMENT, CNIError
from multusd.cni.conf import (
    NetworkConfigList,
    conf_from_bytes,
    conflist_from_bytes,
    conflist_from_conf,
)
from multusd.networks.chains import auxiliary_chain
from multusd.networks.cluster_network import cluster_and_default_networks, inline_delegates
from multusd.networks.delegates import Delegate, delegate_from_bytes, with_cni_args
from multusd.networks.nad_delegates import KubeNetworks
from multusd.networks.netconf import NetConf
from multusd.networks.podnetworks import with_pod_networks

log = logging.getLogger(__name__)


async def delegates_for(
    command: Literal["ADD", "DEL", "CHECK"],
    netconf: NetConf,
    pod: dict[str, Any] | None,
    kube: KubeNetworks | None,
    *,
    pod_label: str = "",
    container_id: str = "",
) -> list[Delegate]:
    """The delegates ``command`` runs for this pod, in execution order.

    * ADD: the cluster network (or the inline delegates) and, with Kubernetes,
      ``defaultNetworks``, then the pod's default-network override and its selections, devices
      allocated; with upstream's two error prefixes (``pod_label`` names the pod), one for the
      cluster/default networks, one for the pod's own networks (annotations). Last, the
      auxiliary CNI chain when ``auxiliaryCNIChainName`` gives it plugins (ADD only, as
      upstream: a DEL finds it in the delegate cache, or not at all).
    * DEL (when the delegate cache is gone): the same list rebuilt from ``pod``, without device
      allocation; with no pod, the cluster network alone (``container_id`` names the container
      in the log).
    * CHECK: the config's inline delegates only; none with a ``clusterNetwork``.
    """
    if command == "CHECK":
        return [] if netconf.cluster_network else inline_delegates(netconf)
    if command == "DEL":
        kube = replace(kube, devices=None) if kube is not None else None
        if pod is not None:
            return await _rebuild(netconf, pod, kube)
        return await _cluster_only(netconf, kube, container_id)
    try:
        delegates = await cluster_and_default_networks(netconf, pod, kube)
    except CNIError as exc:
        raise exc.with_prefix(
            f"Multus: [{pod_label}]: failed to get clusterNetwork/defaultNetworks: "
        ) from exc
    try:
        delegates = await with_pod_networks(netconf, pod, kube, delegates)
    except CNIError as exc:
        raise exc.with_prefix(
            f"Multus: [{pod_label}]: error loading k8s delegates k8s args: "
        ) from exc
    auxiliary = await auxiliary_chain(netconf, pod_label)
    return delegates if auxiliary is None else [*delegates, auxiliary]


async def _rebuild(
    netconf: NetConf, pod: dict[str, Any], kube: KubeNetworks | None
) -> list[Delegate]:
    """No delegate cache (lost, or an older daemon's): rebuild the list as an ADD would
    (docs/upstream.md, "DEL", step 3), without device allocation. A cluster-network failure fails
    the DEL; a pod-network failure only when nothing at all could be rebuilt."""
    delegates = await cluster_and_default_networks(netconf, pod, kube)
    try:
        return await with_pod_networks(netconf, pod, kube, delegates)
    except CNIError as exc:
        if not delegates:
            raise
        log.warning("Multus: rebuilding the pod's networks for DEL: %s", exc)
        return delegates


async def _cluster_only(
    netconf: NetConf, kube: KubeNetworks | None, container_id: str
) -> list[Delegate]:
    """Neither a delegate cache nor a pod: the networks that need no pod, i.e. the cluster
    network (or the config's inline delegates).

    The pod's own networks (and a default-network override) are unknowable now; the cluster
    network is not, and deleting it frees its IPAM. Should this container never have had it,
    the DEL finds nothing to undo, which plugins answer with success (the spec's DEL is
    idempotent). A failure to resolve it is only logged: upstream's DEL succeeds here.
    """
    try:
        delegates = await cluster_and_default_networks(netconf, None, kube)
    except CNIError as exc:
        log.warning(
            "Multus: failed to get the cached delegates file for %s, cannot properly delete: %s",
            container_id,
            exc,
        )
        return []
    log.warning(
        "Multus: no delegate cache and no pod for %s: deleting the cluster network only",
        container_id,
    )
    return delegates


def hotplug_delegate(config: bytes, ifname: str, attributes: dict[str, Any] | None) -> Delegate:
    """``/delegate``: the one delegate the request describes: its config (the plugin's own),
    the runtime's ifname, the interface attributes (IPs, MAC, CNI args)."""
    delegate = delegate_from_bytes(config)
    attrs = attributes or {}
    ips = attrs.get("ips") or []
    mac = attrs.get("mac") or ""
    if not isinstance(ips, list) or not all(isinstance(ip, str) for ip in ips):
        raise CNIError(INVALID_ENVIRONMENT, "interfaceAttributes: ips must be a list of strings")
    if not isinstance(mac, str):
        raise CNIError(INVALID_ENVIRONMENT, "interfaceAttributes: mac must be a string")
    cni_args = attrs.get("cni-args")
    if cni_args is not None:
        if not isinstance(cni_args, dict):
            raise CNIError(INVALID_ENVIRONMENT, "interfaceAttributes: cni-args must be an object")
        delegate = with_cni_args(delegate, cni_args)
    requested = tuple(ips) if attrs.get("ips") is not None else None
    return replace(delegate, ifname_request=ifname, ip_request=requested, mac_request=mac)


async def cluster_network_list(
    netconf: NetConf, kube: KubeNetworks | None = None
) -> NetworkConfigList:
    """The cluster network as a conflist, for the node-level verbs (GC and STATUS:
    docs/upstream.md, "STATUS" and "GC").

    A single-plugin config becomes a one-plugin list, as libcni does; libcni then applies its
    1.1.0 gate to the list, which skips old plugins as upstream's single-plugin path does.
    """
    try:
        first = (await cluster_and_default_networks(netconf, None, kube))[0]
    except CNIError as exc:
        raise exc.with_prefix("Multus: failed to get clusterNetwork: ") from exc
    if first.is_conflist:
        return conflist_from_bytes(first.raw)
    return conflist_from_conf(conf_from_bytes(first.raw))
