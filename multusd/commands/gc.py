"""CNI GC (docs/upstream.md, "GC"): let the cluster network clean up attachments that no longer
exist.

Upstream ignores the runtime's ``cni.dev/valid-attachments`` and treats every cached attachment
as valid, so nothing stale is ever collected. We pass the runtime's list through when it sends
one (see docs/compatibility.md) and fall back to upstream's scan of the result cache otherwise.

With the runtime's list we also remove Multus' own delegate caches (``<cniDir>/<containerID>``)
of every container not on it: upstream never does, and a node collects one file per sandbox
whose DEL never came (#1488 reports 300k). Without a list nothing is known to be stale, so they
stay. An ADD writes its cache before its delegates run, so this trusts the runtime not to leave
off its list a container whose ADD is still running; if one did, that container's DEL finds no
cache and falls back to its pod, or to the cluster network alone (commands/delete.py).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from cni_shim.errors import CNIError
from multusd.cni.api import GCAttachment
from multusd.cni.cache import gather_valid_attachments
from multusd.commands import scratch
from multusd.commands.context import CmdArgs, Services
from multusd.networks.netconf import load_netconf
from multusd.networks.resolve import cluster_network_list

log = logging.getLogger(__name__)

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


async def _collect_delegate_caches(cni_dir: str, valid: list[tuple[str, str]]) -> None:
    collected = await scratch.collect(cni_dir, {container_id for container_id, _ in valid})
    if collected.removed:
        log.info("GC: removed %d stale delegate caches from %s", collected.removed, cni_dir)
    for failure in collected.failed:
        log.warning("GC: could not remove the stale delegate cache %s", failure)


async def gc(cmd: CmdArgs, services: Services) -> None:
    netconf = load_netconf(cmd.config)
    netlist = await cluster_network_list(netconf, services.networks)
    valid = runtime_attachments(cmd.config)
    from_runtime = valid is not None
    if valid is None:
        try:
            valid = await gather_valid_attachments(netconf.cni_dir)
        except CNIError as exc:
            raise exc.with_prefix("error in gather valid attachments: ") from exc
    cni = services.cni_for(netconf)
    attachments = [GCAttachment(container_id, ifname) for container_id, ifname in valid]
    failed: CNIError | None = None
    try:
        await cni.gc_network_list(netlist, attachments)
    except CNIError as exc:
        failed = exc.with_prefix("error in GC command: ")
    if from_runtime:  # whatever the network GC did: a stale container stays stale
        try:
            await _collect_delegate_caches(netconf.cni_dir, valid)
        except CNIError as exc:
            if failed is None:
                raise
            log.warning("GC: %s", exc)
    if failed is not None:
        raise failed
