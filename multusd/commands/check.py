"""CNI CHECK (docs/upstream.md, "CHECK"): only the config's inline delegates, stopping at the first
error.

With a ``clusterNetwork`` config (every generated one) there are none, so CHECK succeeds
without running anything; that is upstream's behaviour and is kept (see compatibility.md).
"""

from __future__ import annotations

from multusd.commands.add import k8s_args_of
from multusd.commands.context import CmdArgs, Services
from multusd.commands.delegate import delegate_check
from multusd.commands.runtime_conf import runtime_for
from multusd.networks.netconf import load_netconf
from multusd.networks.resolve import delegates_for


async def check(cmd: CmdArgs, services: Services) -> None:
    netconf = load_netconf(cmd.config)
    k8s = k8s_args_of(cmd)
    delegates = await delegates_for("CHECK", netconf, None, services.networks)
    if not delegates:
        return
    cni = services.cni_for(netconf)
    env_args = services.environ.get("CNI_ARGS", "")
    for index, delegate in enumerate(delegates):
        rt = runtime_for(cmd, k8s, netconf, delegate, index, env_args=env_args)
        await delegate_check(cni, delegate, rt)
