"""The networks before a pod's own: the cluster network (the master), then ``defaultNetworks``.

Upstream ``GetDefaultNetworks``: ``clusterNetwork`` (and each of ``defaultNetworks``) is a NAD
in ``multusNamespace``, else a CNI config of that name in ``confDir``, or a path; without
Kubernetes only the disk forms exist and ``defaultNetworks`` is not read. With an empty
``clusterNetwork`` the config's own inline ``delegates`` are used instead. A cluster network
that cannot be resolved fails with upstream's fixed text, the reason in the details.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cni_shim import gojson
from cni_shim.errors import CNIError
from multusd.networks.delegates import Delegate, delegate_from_bytes, invalid_config
from multusd.networks.nad_delegates import KubeNetworks, PerPod, nad_delegate
from multusd.networks.netconf import NetConf
from multusd.networks.ondisk import find_by_name, resolve_on_disk
from multusd.networks.selection import SelectionElement


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
        found = await resolve_on_disk(netconf.cluster_network, netconf.conf_dir)
    except CNIError as exc:
        raise cluster_network_error(netconf, exc) from exc
    return found.as_master()


async def named_network(per_pod: PerPod, name: str, netconf: NetConf) -> Delegate:
    """Upstream ``getNetDelegate``: a cluster/default network given by name or path
    (docs/upstream.md, "Cluster and default networks")."""
    if "/" in name:
        return await resolve_on_disk(name, netconf.conf_dir)
    element = SelectionElement(name=name, namespace=netconf.multus_namespace)
    try:
        return await nad_delegate(per_pod, element, netconf)
    except CNIError:
        pass  # upstream falls back to a CNI config of that name in confDir
    found = await find_by_name(Path(netconf.conf_dir), name)
    if found is None:
        raise invalid_config(f"getNetDelegate: cannot find network: {name}")
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
    per_pod: PerPod, netconf: NetConf, pod: dict[str, Any] | None
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


async def cluster_and_default_networks(
    netconf: NetConf, pod: dict[str, Any] | None = None, kube: KubeNetworks | None = None
) -> list[Delegate]:
    """The cluster network (or the inline delegates) and, with Kubernetes, ``defaultNetworks``.

    The pod's own networks come on top (``podnetworks``); upstream words the errors of the two
    steps differently, so callers keep them apart.
    """
    if not netconf.cluster_network:
        return inline_delegates(netconf)
    if kube is not None:
        return await default_networks(PerPod(kube, pod), netconf, pod)
    return [await cluster_network(netconf)]
