"""CNI STATUS (reference §7.3): is the cluster network ready to serve ADDs?

Only the first delegate (the cluster network) is asked. Plugins older than CNI 1.1.0 have no
STATUS and count as ready. A plugin's CNI error (e.g. 50, "not available") reaches the runtime
with its code, so the node can be marked not-ready.
"""

from __future__ import annotations

from cni_shim import results
from cni_shim.errors import CNIError
from multusd.cni.conf import conf_from_bytes, conflist_from_bytes, conflist_from_conf
from multusd.commands.context import CmdArgs, Services
from multusd.networks.netconf import load_netconf
from multusd.networks.resolve import resolve_delegates


async def status(cmd: CmdArgs, services: Services) -> None:
    netconf = load_netconf(cmd.config)
    try:
        delegates = await resolve_delegates(netconf)
    except CNIError as exc:
        raise exc.with_prefix("Multus: failed to get clusterNetwork: ") from exc
    first = delegates[0]
    cni = services.cni_for(netconf)
    if first.is_conflist:
        await cni.get_status_network_list(conflist_from_bytes(first.raw))
        return
    if not first.cni_version or not results.version_ge(first.cni_version, "1.1.0"):
        return
    await cni.get_status_network_list(conflist_from_conf(conf_from_bytes(first.raw)))
