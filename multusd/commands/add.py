"""CNI ADD (docs/upstream.md, "ADD"): resolve delegates, cache them, run them in order, roll back on
failure.

Returns the master delegate's result, converted to the newest CNI version; the server encodes
it and the shim converts it to the runtime's version. A cancelled ADD (a DEL superseded it, the
runtime killed the shim, the daemon is stopping) rolls back the way a failing one does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from cni_shim import results
from cni_shim.errors import INTERNAL, CNIError
from multusd import timeline
from multusd.cni.api import RuntimeConf
from multusd.cni.args import K8sArgs, parse_k8s_args
from multusd.cni.invoke import Starts, counting_starts, current_deadline, plugin_deadline
from multusd.cni.pending import Pending
from multusd.cni.routes import apply_default_routes, rewrite_cached_routes
from multusd.commands import scratch
from multusd.commands.context import CmdArgs, Services
from multusd.commands.delegate import (
    check_ifname,
    delegate_add,
    delegate_del,
    record_added_interface,
)
from multusd.commands.runtime_conf import device_info_path, runtime_for
from multusd.k8s.devinfo import copy_device_plugin_info, load_device_info
from multusd.k8s.pods import AnnotationsTooLarge, PodLookup
from multusd.networks.delegates import Delegate
from multusd.networks.gateways import route_actions
from multusd.networks.netconf import NetConf, load_netconf
from multusd.networks.netstatus import annotation_value, statuses_for
from multusd.networks.resolve import delegates_for

log = logging.getLogger(__name__)

ROLLBACK_SECONDS = 10.0
"""The least time a rollback gets for its DELs, even when the ADD failed at its deadline."""


def k8s_args_of(cmd: CmdArgs) -> K8sArgs:
    try:
        return parse_k8s_args(cmd.args)
    except CNIError as exc:
        raise exc.with_prefix("Multus: error getting k8s args: ") from exc


async def _rollback(
    services: Services,
    netconf: NetConf,
    cmd: CmdArgs,
    k8s: K8sArgs,
    delegates: list[Delegate],
) -> None:
    """DEL the delegates from the failing one down to the first, ignoring errors
    (docs/upstream.md, "ADD", step 7).

    It gets at least :data:`ROLLBACK_SECONDS` of plugin time, beyond the request's deadline if
    need be: an ADD that failed *at* its deadline must still release what it took.
    """
    cni = services.cni_for(netconf)
    env_args = services.environ.get("CNI_ARGS", "")
    deadline = current_deadline()
    if deadline is not None:
        deadline = max(deadline, asyncio.get_running_loop().time() + ROLLBACK_SECONDS)
    with plugin_deadline(deadline):
        for index in range(len(delegates) - 1, -1, -1):
            delegate = delegates[index]
            rt = runtime_for(cmd, k8s, netconf, delegate, index, env_args=env_args)
            try:
                await delegate_del(cni, delegate, rt)
            except CNIError as exc:
                log.warning("rollback of %s failed: %s", delegate.name, exc)


async def _default_routes(
    cmd: CmdArgs, netconf: NetConf, pod_label: str, delegate: Delegate, ifname: str
) -> None:
    """Move the default route as the pod's ``default-route`` requests asked
    (docs/upstream.md, "Default-route handling"): in the pod's namespace, then in the libcni
    result cache. Errors fail the ADD without rollback, as upstream."""
    actions = route_actions(delegate)
    if not actions.any:
        return
    try:
        await apply_default_routes(cmd.netns, ifname, actions)
        await rewrite_cached_routes(
            netconf.cni_dir, delegate.network_name, cmd.container_id, ifname, actions
        )
    except CNIError as exc:
        raise exc.with_prefix(f"Multus: [{pod_label}]: ") from exc


class _CacheNotSaved(CNIError):
    """The delegate cache could not be written: nothing ran, so nothing is rolled back."""


class _StatusRefused(CNIError):
    """The network-status annotation was refused before it was written, for its size
    (:class:`~multusd.k8s.pods.AnnotationsTooLarge`): every retry would be refused the same way,
    so the ADD rolls its delegates back at once, as for a failing delegate."""


async def _save_and_check(
    netconf: NetConf, cmd: CmdArgs, pod_label: str, delegates: list[Delegate], rt: RuntimeConf
) -> None:
    saved, checked = await asyncio.gather(
        scratch.save(netconf.cni_dir, cmd.container_id, delegates),
        check_ifname(delegates[0], rt),
        return_exceptions=True,
    )
    if isinstance(saved, CNIError):
        raise _CacheNotSaved(saved.code, f"Multus: [{pod_label}]: {saved.msg}", saved.details)
    for outcome in (saved, checked):
        if isinstance(outcome, BaseException):
            raise outcome


def _master_result(delegates: list[Delegate], found: list[dict[str, Any]]) -> dict[str, Any]:
    for delegate, result in zip(delegates, found, strict=True):
        if delegate.master:
            return result
    return found[0]


async def add(cmd: CmdArgs, services: Services) -> dict[str, Any]:
    netconf = load_netconf(cmd.config)
    k8s = k8s_args_of(cmd)
    pod_label = k8s.label()
    pod: dict[str, Any] | None = None
    if services.pods is not None:
        with services.metrics.phase("pod_lookup"):
            pod = await services.pods.get_pod(
                k8s.pod_namespace, k8s.pod_name, k8s.pod_uid, is_del=False
            )
        if pod is None:
            # Upstream HEAD (#1408): a pod that no longer exists gets no networks, only an
            # empty result, so the runtime can tear the sandbox down quickly.
            log.warning("pod %s not found: returning an empty result", pod_label)  # fmt: skip
            return results.empty_result(netconf.cni_version, cmd.ifname, cmd.netns)
    with timeline.phase("delegates"):
        delegates = await delegates_for("ADD", netconf, pod, services.networks, pod_label=pod_label)

    cni = services.cni_for(netconf)
    env_args = services.environ.get("CNI_ARGS", "")
    found: list[dict[str, Any]] = []
    ifnames: list[str] = []
    started = 0  # delegates whose ADD began: what a cancellation rolls back
    writes = Pending()  # the delegates' result caches, written beside what follows (pending.py)
    try:
        for index, delegate in enumerate(delegates):
            started = index + 1
            runs: Starts | None = None  # set once the delegate's plugins are about to run
            try:
                rt = runtime_for(cmd, k8s, netconf, delegate, index, env_args=env_args, legacy=True)
                if index == 0:
                    # The cache must be on disk before any delegate runs; checking the first
                    # interface name in the pod meanwhile takes that write off the critical path.
                    with timeline.phase("cache_save"):
                        await _save_and_check(netconf, cmd, pod_label, delegates, rt)
                if delegate.resource_name and delegate.device_id:
                    await copy_device_plugin_info(
                        delegate.resource_name, delegate.device_id, delegate.name,
                        cmd.container_id, rt.ifname,
                    )  # fmt: skip
                plugin = delegate.plugin_type or delegate.name
                with (
                    services.metrics.phase("delegate", plugin=plugin),
                    counting_starts() as runs,
                    writes.collecting(delegate.network_name),
                ):
                    result = await delegate_add(cni, delegate, rt, ifname_checked=index == 0)
            except CNIError as exc:
                if isinstance(exc, _CacheNotSaved):
                    raise
                # The failing delegate is rolled back too (upstream), unless none of its
                # plugins ever started (refused for memory, or out of time before one).
                ran = index + 1 if runs is None or runs.count else index
                await writes.settle()  # the rollback's DELs read those caches
                await _rollback(services, netconf, cmd, k8s, delegates[:ran])
                raise _adding_failed(k8s, delegate.network_name, exc) from exc
            with timeline.phase("convert"):
                latest = results.convert(result, results.LATEST)
            found.append(latest)
            ifnames.append(rt.ifname)
            if results.has_interfaces_or_ips(latest):
                if route_actions(delegate).any:  # it rewrites the result cache: on disk first
                    failed = await writes.settle()
                    await _fail_on_unwritten(
                        failed, services, netconf, cmd, k8s, added=delegates[:started]
                    )
                await _default_routes(cmd, netconf, pod_label, delegate, rt.ifname)
                record_added_interface(services, pod, latest, rt.ifname, delegate.name)
            log.debug("added %s as %s", delegate.name, rt.ifname)
    except asyncio.CancelledError:
        # A second cancellation must not cost the rollback: the writes are awaited, not stopped.
        with contextlib.suppress(asyncio.CancelledError):
            await writes.settle()
        if started:
            log.info("ADD cancelled: rolling back %d delegate(s)", started)
            await _rollback(services, netconf, cmd, k8s, delegates[:started])
        raise
    attached = list(zip(delegates, found, ifnames, strict=True))
    failed, status_error = await asyncio.gather(
        writes.settle(), _status_write(services, cmd, k8s, attached, pod)
    )
    await _fail_on_unwritten(failed, services, netconf, cmd, k8s, added=delegates)
    if status_error is not None:
        # Any other failed write leaves the delegates to the runtime's DEL, as upstream does.
        if isinstance(status_error, _StatusRefused):
            await _rollback(services, netconf, cmd, k8s, delegates)
        raise status_error
    return _master_result(delegates, found)


async def _fail_on_unwritten(
    failed: list[tuple[str, BaseException]],
    services: Services,
    netconf: NetConf,
    cmd: CmdArgs,
    k8s: K8sArgs,
    *,
    added: list[Delegate],
) -> None:
    """A result cache that could not be written fails its delegate, as in libcni (whose
    ``AddNetworkList`` writes it last): roll back what was added, raise upstream's text."""
    if not failed:
        return
    name, cause = failed[0]
    await _rollback(services, netconf, cmd, k8s, added)
    error = cause if isinstance(cause, CNIError) else CNIError(INTERNAL, repr(cause))
    raise _adding_failed(k8s, name, error) from cause


def _adding_failed(k8s: K8sArgs, name: str, exc: CNIError) -> CNIError:
    """Upstream's text for a delegate whose ADD failed."""
    return exc.with_prefix(
        f"[{k8s.pod_namespace}/{k8s.pod_name}/{k8s.pod_uid}:{name}]: "
        f'error adding container to network "{name}": '
    )


async def _status_write(
    services: Services,
    cmd: CmdArgs,
    k8s: K8sArgs,
    attached: list[tuple[Delegate, Any, str]],
    pod: dict[str, Any] | None,
) -> CNIError | None:
    """The network-status PATCH, when the daemon talks to an API server; its error if any."""
    if services.pods is None:
        return None
    try:
        with services.metrics.phase("status_write"):
            await _write_network_status(services.pods, cmd, k8s, attached, pod)
    except CNIError as exc:
        return exc
    return None


async def _write_network_status(
    pods: PodLookup,
    cmd: CmdArgs,
    k8s: K8sArgs,
    attached: list[tuple[Delegate, Any, str]],
    pod: dict[str, Any] | None,
) -> None:
    """One entry list for every attached delegate (with its device info), one PATCH; ``pod``,
    as looked up, is what the value's size is judged with (``PodLookup.set_network_status``)."""
    statuses = []
    for delegate, result, ifname in attached:
        info = None
        if delegate.device_id:
            info = await load_device_info(device_info_path(cmd, delegate, ifname))
        statuses += statuses_for(result, delegate.name, delegate.master, info)
    value = annotation_value(statuses)
    try:
        await pods.set_network_status(k8s.pod_namespace, k8s.pod_name, value, pod=pod)
    except CNIError as exc:
        prefix = f"Multus: [{k8s.label()}]: error setting the networks status: "
        if isinstance(exc, AnnotationsTooLarge):
            raise _StatusRefused(exc.code, prefix + exc.msg, exc.details) from exc
        raise exc.with_prefix(prefix) from exc
