"""``POST /delegate``: add, delete, check or ask the status of ONE delegate on a running pod.

Programs that hot-plug interfaces (docs/upstream.md, "Hot-plug (/delegate)") send the delegate
plugin's own config plus optional interface attributes (IPs, MAC, CNI args). Unlike ``/cni`` there
is no delegate cache, no network-status and no gateway handling, a missing pod is an error, and DEL
errors are returned. Upstream also copies the daemon config over the *plugin's* config (quirk 10),
which injects Multus keys into the plugin's stdin; we leave the plugin's config as it was sent.
"""

from __future__ import annotations

from typing import Any

from cni_shim import results
from cni_shim.errors import INTERNAL, INVALID_ENVIRONMENT, CNIError
from multusd.cni.conf import conf_from_bytes, conflist_from_bytes, conflist_from_conf
from multusd.commands.add import k8s_args_of
from multusd.commands.context import CmdArgs, Services
from multusd.commands.delegate import (
    delegate_add,
    delegate_check,
    delegate_del,
    record_added_interface,
)
from multusd.commands.runtime_conf import runtime_for
from multusd.networks.netconf import NetConf
from multusd.networks.resolve import hotplug_delegate


async def hotplug(
    cmd: CmdArgs,
    attributes: dict[str, Any] | None,
    services: Services,
    netconf: NetConf,
) -> dict[str, Any] | None:
    """Run ``cmd.command`` for the one delegate in ``cmd.config``; ``netconf`` gives the
    daemon's settings (``binDir``, ``cniDir``, ...)."""
    if cmd.command not in ("ADD", "DEL", "CHECK", "STATUS"):
        raise CNIError(INVALID_ENVIRONMENT, f"unknown cmd type: {cmd.command}")
    k8s = k8s_args_of(cmd)
    pod: dict[str, Any] | None = None
    if services.pods is not None and cmd.command in ("ADD", "DEL"):
        pod = await services.pods.get_pod(
            k8s.pod_namespace, k8s.pod_name, k8s.pod_uid, is_del=False
        )
        if pod is None:
            raise CNIError(INTERNAL, f"Multus: [{k8s.label()}]: pod not found")
    delegate = hotplug_delegate(cmd.config, cmd.ifname, attributes)
    cni = services.cni_for(netconf)
    env_args = services.environ.get("CNI_ARGS", "")
    rt = runtime_for(cmd, k8s, netconf, delegate, 0, env_args=env_args, legacy=cmd.command == "ADD")
    if cmd.command == "ADD":
        result = results.convert(await delegate_add(cni, delegate, rt), results.LATEST)
        if results.has_interfaces_or_ips(result):
            record_added_interface(services, pod, result, rt.ifname, delegate.name)
        return result
    if cmd.command == "DEL":
        await delegate_del(cni, delegate, rt)
    elif cmd.command == "CHECK":
        await delegate_check(cni, delegate, rt)
    else:
        netlist = (
            conflist_from_bytes(delegate.raw)
            if delegate.is_conflist
            else conflist_from_conf(conf_from_bytes(delegate.raw))
        )
        await cni.get_status_network_list(netlist)
    return None
