"""CNI GC (reference §7.4): let the cluster network clean up attachments that no longer exist.

Upstream ignores the runtime's ``cni.dev/valid-attachments`` and treats every cached attachment
as valid, so nothing stale is ever collected. We pass the runtime's list through when it sends
one (see docs/compatibility.md) and fall back to upstream's scan of the result cache otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from cni_shim.errors import CNIError
from multusd.cni.api import GCAttachment
from multusd.cni.cache import gather_valid_attachments
from multusd.commands.context import CmdArgs, Services
from multusd.networks.netconf import load_netconf
from multusd.networks.resolve import cluster_network_list

VALID_ATTACHMENTS = "cni.dev/valid-attachments"


def runtime_attachments(config: bytes) -> list[tuple[str, str]] | None:
    """The ``(containerID, ifname)`` pairs the runtime says are still in use, if it said."""
    try:
        conf: Any = json.loads(config)
    except ValueError:
        return None
    listed = conf.get(VALID_ATTACHMENTS) if isinstance(conf, dict) else None
    if not isinstance(listed, list):
        return None
    return [
        (str(item.get("containerID", "")), str(item.get("ifname", "")))
        for item in listed
        if isinstance(item, dict)
    ]


async def gc(cmd: CmdArgs, services: Services) -> None:
    netconf = load_netconf(cmd.config)
    netlist = await cluster_network_list(netconf, services.networks)
    valid = runtime_attachments(cmd.config)
    if valid is None:
        try:
            valid = await gather_valid_attachments(netconf.cni_dir)
        except CNIError as exc:
            raise exc.with_prefix("error in gather valid attachments: ") from exc
    cni = services.cni_for(netconf)
    attachments = [GCAttachment(container_id, ifname) for container_id, ifname in valid]
    try:
        await cni.gc_network_list(netlist, attachments)
    except CNIError as exc:
        raise exc.with_prefix("error in GC command: ") from exc
