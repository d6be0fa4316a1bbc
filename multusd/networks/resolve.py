"""Which delegates a pod gets, in execution order (reference §6.1 step 6, §6.5).

Cluster network first (the master), then default networks, then the pod's own selections.
Without Kubernetes only the first part exists: ``clusterNetwork`` from disk, or the inline
``delegates`` list.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cni_shim import gojson
from cni_shim.errors import CNIError
from multusd.cni.conf import (
    NetworkConfigList,
    conf_from_bytes,
    conflist_from_bytes,
    conflist_from_conf,
)
from multusd.networks.delegates import Delegate, delegate_from_bytes, resolve_on_disk
from multusd.networks.netconf import NetConf
from multusd.networks.podnetworks import (
    KubeNetworks,
    cluster_delegates,
    cluster_network_error,
    with_pod_delegates,
)


def inline_delegates(netconf: NetConf) -> list[Delegate]:
    """The config's own ``delegates`` (used only when ``clusterNetwork`` is empty)."""
    out: list[Delegate] = []
    for index, conf in enumerate(netconf.delegates):
        try:
            # Upstream re-marshals each inline delegate from a Go map: keys sorted.
            out.append(delegate_from_bytes(gojson.dumps(conf, sort_keys=True).encode()))
        except CNIError as exc:
            raise exc.with_prefix(
                f"Multus: error loading netconf: LoadNetConf: failed to load delegate {index} "
                "config: "
            ) from exc
    if out:
        out[0] = out[0].as_master()
    return out


async def cluster_network(netconf: NetConf) -> Delegate:
    """Resolve ``clusterNetwork``; upstream replaces the reason with a fixed text (kept)."""
    try:
        found = await asyncio.to_thread(resolve_on_disk, netconf.cluster_network, netconf.conf_dir)
    except CNIError as exc:
        raise cluster_network_error(netconf, exc) from exc
    return found.as_master()


async def resolve_delegates(
    netconf: NetConf, pod: dict[str, Any] | None = None, kube: KubeNetworks | None = None
) -> list[Delegate]:
    """The cluster network (or the inline delegates) and, with Kubernetes, ``defaultNetworks``.

    The pod's own networks come on top through :func:`add_pod_delegates`; upstream words the
    errors of the two steps differently, so callers keep them apart.
    """
    if not netconf.cluster_network:
        return inline_delegates(netconf)
    if kube is not None:
        return await cluster_delegates(netconf, pod, kube)
    return [await cluster_network(netconf)]


async def add_pod_delegates(
    netconf: NetConf,
    pod: dict[str, Any] | None,
    kube: KubeNetworks | None,
    delegates: list[Delegate],
) -> list[Delegate]:
    """The pod's default-network override and network selections (Kubernetes mode only)."""
    if kube is None or pod is None:
        return delegates
    return await with_pod_delegates(netconf, pod, kube, delegates)


async def cluster_network_list(
    netconf: NetConf, kube: KubeNetworks | None = None
) -> NetworkConfigList:
    """The cluster network as a conflist, for the node-level verbs (GC and STATUS, §7.3–7.4).

    A single-plugin config becomes a one-plugin list, as libcni does; libcni then applies its
    1.1.0 gate to the list, which skips old plugins as upstream's single-plugin path does.
    """
    try:
        first = (await resolve_delegates(netconf, None, kube))[0]
    except CNIError as exc:
        raise exc.with_prefix("Multus: failed to get clusterNetwork: ") from exc
    if first.is_conflist:
        return conflist_from_bytes(first.raw)
    return conflist_from_conf(conf_from_bytes(first.raw))
