"""CNI DEL (docs/upstream.md, "DEL"): undo what the cached delegates did, and never strand the
runtime.

Everything is best effort: a missing cache, a gone pod or a failing delegate must not stop the
remaining delegates from being deleted. Errors are reported joined, after all were tried.

Nothing here waits: the pod is read from the watch cache once (no wait for it to appear, no
live GET; a missing pod is normal on DEL), and with neither a delegate cache nor a pod the
cluster network, which needs no pod, is still deleted so its address is released (upstream
returns without deleting anything; docs/compatibility.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import Any

from cni_shim import gojson
from cni_shim.errors import INTERNAL, CNIError
from multusd import timeline
from multusd.cni.pending import Pending
from multusd.commands import scratch
from multusd.commands.add import k8s_args_of
from multusd.commands.context import CmdArgs, Services
from multusd.commands.delegate import delegate_del
from multusd.commands.runtime_conf import device_info_path, runtime_for
from multusd.k8s.devinfo import remove_device_info
from multusd.networks.delegates import Delegate, delegate_from_bytes
from multusd.networks.netconf import NetConf, load_netconf
from multusd.networks.resolve import delegates_for

log = logging.getLogger(__name__)


def _backfill_version(delegate: Delegate, version: str) -> Delegate:
    """Conflists cached without ``cniVersion`` get the Multus one, keeping every other key."""
    if not delegate.is_conflist or delegate.cni_version or not version:
        return delegate
    try:
        conf = json.loads(delegate.raw)
        conf["cniVersion"] = version
        patched = delegate_from_bytes(gojson.dumps(conf, sort_keys=True).encode())
    except (ValueError, TypeError, CNIError):
        return delegate
    return replace(delegate, raw=patched.raw, conf=patched.conf)


async def delete(cmd: CmdArgs, services: Services) -> None:
    netconf = load_netconf(cmd.config)
    k8s = k8s_args_of(cmd)
    pod: dict[str, Any] | None = None
    if services.pods is not None:
        try:
            pod = await services.pods.get_pod(
                k8s.pod_namespace, k8s.pod_name, k8s.pod_uid, is_del=True
            )
        except CNIError as exc:
            log.warning("Multus: GetPod failed: %s, but continue to delete", exc)  # fmt: skip
    try:
        with timeline.phase("cache_load"):
            delegates = await scratch.load(netconf.cni_dir, cmd.container_id)
    except scratch.CorruptCache as exc:
        log.error("Multus: %s; nothing deleted", exc)
        return
    from_cache = delegates is not None
    if delegates is None:  # rebuilt from the pod, or the cluster network alone
        with timeline.phase("delegates"):
            delegates = await delegates_for(
                "DEL", netconf, pod, services.networks, container_id=cmd.container_id
            )
    delegates = _within_bound(delegates, netconf, cmd.container_id)

    cni = services.cni_for(netconf)
    env_args = services.environ.get("CNI_ARGS", "")
    errors: list[CNIError] = []
    # Each delegate's result cache is removed beside the next delegate's DEL (pending.py).
    removals = Pending()
    try:
        for index in range(len(delegates) - 1, -1, -1):
            delegate = _backfill_version(delegates[index], netconf.cni_version)
            rt = runtime_for(cmd, k8s, netconf, delegate, index, env_args=env_args)
            try:
                with removals.collecting(delegate.network_name):
                    await delegate_del(cni, delegate, rt)
            except CNIError as exc:
                errors.append(exc)
            if delegate.device_id:
                await remove_device_info(device_info_path(cmd, delegate, rt.ifname))
    except BaseException:  # cancelled: nothing of ours keeps running unowned
        await removals.settle()
        raise

    joined = " / ".join(str(e) for e in errors)
    # retryDeleteOnError keeps the cache for the runtime's next DEL, except after the one error
    # upstream singles out by its text (a plugin whose state is already gone).
    if from_cache and (
        not netconf.retry_delete_on_error or not errors or "no such file or directory" in joined
    ):
        await asyncio.gather(removals.settle(), _remove_cache(netconf, cmd))
    else:
        await removals.settle()
    if errors:
        code = errors[0].code if len(errors) == 1 else INTERNAL
        raise CNIError(code, f"errors: {joined}")


def most_delegates(netconf: NetConf) -> int:
    """How many delegates an ADD of this daemon can have cached for one container: the
    cluster network (or the inline delegates), ``defaultNetworks``, at most
    ``maxNetworksPerPod`` of the pod's own, and the auxiliary CNI chain when
    ``auxiliaryCNIChainName`` is set."""
    return (
        max(1, len(netconf.delegates)) + len(netconf.default_networks)
        + netconf.max_networks_per_pod + bool(netconf.auxiliary_cni_chain_name)
    )  # fmt: skip


def _within_bound(delegates: list[Delegate], netconf: NetConf, container_id: str) -> list[Delegate]:
    """The delegates this DEL runs: all of them, unless the cache lists more than an ADD of
    this daemon can (an older daemon's, or upstream's, for a pod that asked for thousands of
    networks). Then the first :func:`most_delegates` are deleted (the cluster and default
    networks among them) and the rest only logged: one plugin run each would take the DEL past
    any runtime's patience, and a DEL that never succeeds strands the sandbox for ever. What
    they hold is for the runtime's CNI GC to release; the cache goes with this DEL."""
    bound = most_delegates(netconf)
    if len(delegates) <= bound:
        return delegates
    log.error(
        "Multus: the cache of %s lists %d delegates, more than this daemon's ADD can cache "
        "(%d, with maxNetworksPerPod %d): deleting the first %d, skipping %d (their IPAM is "
        "left to the runtime's GC)",
        container_id, len(delegates), bound, netconf.max_networks_per_pod, bound,
        len(delegates) - bound,
    )  # fmt: skip
    return delegates[:bound]


async def _remove_cache(netconf: NetConf, cmd: CmdArgs) -> None:
    with timeline.phase("cache_remove"):
        await scratch.remove(netconf.cni_dir, cmd.container_id)
