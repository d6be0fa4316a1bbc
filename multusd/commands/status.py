"""CNI STATUS (docs/upstream.md, "STATUS"): is the cluster network ready to serve ADDs?

Only the first delegate (the cluster network) is asked. Plugins older than CNI 1.1.0 have no
STATUS and count as ready. A plugin's CNI error (e.g. 50, "not available") reaches the runtime
with its code, so the node can be marked not-ready.
"""

from __future__ import annotations

from multusd.commands.context import CmdArgs, Services
from multusd.networks.netconf import load_netconf
from multusd.networks.resolve import cluster_network_list


async def status(cmd: CmdArgs, services: Services) -> None:
    netconf = load_netconf(cmd.config)
    netlist = await cluster_network_list(netconf, services.networks)
    await services.cni_for(netconf).get_status_network_list(netlist)
